"""docs/FORMAT.md's sqlite3 + numpy example runs against a real recording."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"


def test_format_example_reads_a_recording(recording) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/FORMAT.md lost its Python example"
    path, sim = recording
    out = subprocess.run([sys.executable, "-c", blocks[0], str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "finished ['contiguous:first-fit:max', 'paged:16']" in out.stdout
    assert f"{sim.lanes[0].name}: {sim.lanes[0].capacity} blocks" in out.stdout
    want = [e for e in sim.events.events if e.lane == sim.lanes[0].name]
    assert (f"{sim.lanes[0].name}: {len(want)} events, the first {want[0].kind} (sequence "
            f"{want[0].seq_id})") in out.stdout
