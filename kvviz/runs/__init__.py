"""The runs directory and the background jobs that write into it (no streamlit).

    directory.py  where recordings live; listing and name checks of recordings, node
                  recordings, KV-event recordings, traces and torch snapshots
    status.py     JobStatus: what a background job is doing, one record for every job
    process.py    LoggedProcess: one child process with its log, started and stopped here
    jobs.py       the jobs the dashboard runs: the demo collector and a node scrape

Nothing here imports above kvviz.node: pages/ and collectors/ sit on top of it.
"""
