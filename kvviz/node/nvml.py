"""Device memory as the driver sees it, through NVML (`import pynvml`, package nvidia-ml-py).

Without a driver (no libnvidia-ml: NVMLError_LibraryNotFound) the probe says "unavailable"
with the reason, once, and every sample then carries that status instead of numbers.
"""
from __future__ import annotations

import os
from typing import Any


class NvmlProbe:
    """status is "ok" or "unavailable"; reason says why in plain words."""

    def __init__(self) -> None:
        self.status = "unavailable"
        self.reason = ""
        self._nvml: Any = None
        self._handles: list[Any] = []
        try:
            import pynvml
        except ImportError:
            self.reason = "pynvml (package nvidia-ml-py) is not installed"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError_LibraryNotFound:
            self.reason = "no NVIDIA driver: the NVML library (libnvidia-ml.so) was not found"
            return
        except pynvml.NVMLError_DriverNotLoaded:
            self.reason = "the NVIDIA driver is not loaded"
            return
        except pynvml.NVMLError as exc:
            self.reason = f"NVML failed to start: {exc}"
            return
        self._nvml = pynvml
        if not self._handles:
            self.reason = "NVML found no GPU"
            return
        self.status = "ok"

    def _device(self, i: int, h: Any) -> dict:
        nv = self._nvml
        rec: dict = {"device_index": i, "nvml_status": "ok", "nvml_reason": ""}
        name = nv.nvmlDeviceGetName(h)
        rec["device_name"] = name.decode() if isinstance(name, bytes) else str(name)
        try:  # v2 adds `reserved` (driver/firmware memory); older drivers only know v1
            mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
            rec["nvml_reserved_bytes"] = int(mem.reserved)
        except (nv.NVMLError, AttributeError, TypeError):
            mem = nv.nvmlDeviceGetMemoryInfo(h)
        rec.update(nvml_total_bytes=int(mem.total), nvml_used_bytes=int(mem.used),
                   nvml_free_bytes=int(mem.free))
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
            mine = [p.usedGpuMemory for p in procs if p.pid == os.getpid()]
            rec["nvml_process_used_bytes"] = int(sum(m or 0 for m in mine))
        except nv.NVMLError:
            pass
        try:
            util = nv.nvmlDeviceGetUtilizationRates(h)
            rec.update(gpu_util_percent=int(util.gpu), mem_util_percent=int(util.memory))
        except nv.NVMLError:
            pass
        return rec

    def sample(self) -> list[dict]:
        """One flat record per device; one "unavailable" record when NVML is not usable."""
        if self.status != "ok":
            return [{"device_index": -1, "nvml_status": self.status, "nvml_reason": self.reason}]
        out = []
        for i, h in enumerate(self._handles):
            try:
                out.append(self._device(i, h))
            except self._nvml.NVMLError as exc:
                out.append({"device_index": i, "nvml_status": "error",
                            "nvml_reason": f"NVML query failed: {exc}"})
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
            self._nvml = None


def probe_devices() -> dict:
    """NVML as the calling process (the dashboard) sees it, read once:
    {'ok': bool, 'error': str, 'devices': [{'index', 'name', '*_bytes'}, ...]}."""
    try:
        import pynvml
    except ImportError as exc:
        return {"ok": False, "error": f"pynvml is not installed ({exc})", "devices": []}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_* subclasses; report the name plainly
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "devices": []}
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            name = pynvml.nvmlDeviceGetName(h)
            devices.append({"index": i, "name": name if isinstance(name, str) else name.decode(),
                            "total_bytes": int(mem.total), "used_bytes": int(mem.used),
                            "free_bytes": int(mem.free)})
        return {"ok": True, "error": "", "devices": devices}
    finally:
        pynvml.nvmlShutdown()
