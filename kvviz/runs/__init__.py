"""The runs directory and the background jobs that write into it (no streamlit).

    directory.py  where recordings live; listing and name checks of recordings, node
                  recordings, KV-event recordings, traces and torch snapshots
    status.py     JobStatus: what a background job is doing, one record for every job
    process.py    LoggedProcess: one child process with its log, started and stopped here
    jobs.py       the jobs the dashboard runs: the demo collector and a node scrape
    lifecycle.py  a child the dashboard started stops when the dashboard is gone or unwatched
    control.py    pause and single-step of the demo collector, through a file beside its run
    advisor.py    the block-size advisor: simulated memory against kernel times (`kvviz bench`)

Nothing here imports above kvviz.node and kvviz.settings: pages/ and collectors/ sit on top
of it (the collector and the commands import lifecycle and control).
"""
