"""vLLM 0.32's scheduling rule and the KV pools it drives, written once and compiled (numba).

Modules, one per concept: state (the struct-of-arrays records), keys (prefix block hashes),
pool (vLLM's paged block pool), placement (contiguous first-fit / best-fit / buddy), kv (the
memory interface the scheduler calls), scheduler (schedule / update), shares, events,
advance (the step loop), build (the records from a workload), lane (the Python handle).
"""
