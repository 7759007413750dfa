"""The one status box for a background job (the demo collector, a node scrape): its state
(running / stopped / stopped unexpectedly / error), pid, uptime, last write to its recording,
the tail of its log, and Stop / Restart buttons. Not a page.

Text that came from outside (a node URL, a log line) is escaped or shown as code.
"""
from __future__ import annotations

import time

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node.trust import plain_markdown as md
from kvviz.runs import directory
from kvviz.runs.status import ERROR, NOT_STARTED, RUNNING, STOPPED, JobStatus
from pages.recording import READ_ERRORS


def duration_text(seconds: float) -> str:
    """45 s, 12 min 03 s, 3 h 07 min."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def last_write_age(recording: str | None) -> float | None:
    """Seconds since the job's recording was last committed (None: not readable yet)."""
    if recording is None:
        return None
    try:
        r = directory.open_run(directory.runs_dir(), recording)
    except READ_ERRORS:
        return None
    try:
        return None if r.heartbeat is None else max(0.0, time.time() - r.heartbeat)
    finally:
        r.close()


def status_text(title: str, s: JobStatus, age_s: float | None) -> str:
    """The box's one line of Markdown, outside text escaped."""
    if s.state == NOT_STARTED:
        return f"{title} not started."
    head = f"{title} {s.state}"
    if s.state == RUNNING:
        head += f" (pid {s.pid}, up {duration_text(s.uptime_s or 0.0)})"
    else:
        head += f" ({s.exit_text})"
    if s.target:
        head += f", {md(s.target)}"
    if s.recording:
        head += f", recording {md(s.recording)}"
        head += ("; it keeps what was written" if s.state != RUNNING else "")
    if age_s is not None:
        head += f"; last written {duration_text(age_s)} ago"
    return head


def job_status(title: str, job, key: str, every_s: float = 1.0, hide_idle: bool = False) -> None:
    """The status box of `job` (job_status_box), redrawn every `every_s` seconds so its
    uptime and last write are read afresh at each refresh, not when the page was opened.
    hide_idle: draw nothing for a job never started (no "not started" box with greyed
    buttons above a form that starts it)."""
    st.fragment(run_every=every_s)(job_status_box)(title, job, key, hide_idle=hide_idle)


def job_status_box(title: str, job, key: str, restart=None,
                   hide_idle: bool = False) -> JobStatus:
    """Draw the status box of `job` (a kvviz.runs.jobs job) with its Stop and Restart
    buttons (keys <key>_stop, <key>_restart); a press acts and reruns the page. `restart`
    (no arguments) replaces job.restart; hide_idle: nothing for a job never started."""
    s = job.status()
    if hide_idle and s.state == NOT_STARTED:
        return s
    text = status_text(title, s, last_write_age(s.recording))
    if s.state == RUNNING:
        st.success(text, icon=":material/radio_button_checked:")
    elif s.state == STOPPED:
        st.warning(text, icon=":material/stop_circle:")
    elif s.state == ERROR:
        st.error(text, icon=":material/error:")
    elif s.state == NOT_STARTED:
        st.info(text, icon=":material/info:")
    else:  # stopped unexpectedly
        st.warning(text, icon=":material/warning:")
    if s.last_message and s.state == RUNNING:  # its progress line: small text, not a log
        st.caption(md(s.last_message.strip().splitlines()[-1]))
    elif s.last_message:  # why it stopped: code, not an expander (the box may sit in one)
        st.code(s.last_message, language=None, wrap_lines=True)  # the whole line, no scroll
    stop, again = st.columns(2)
    # named for what it stops: Streamlit's header shows a "Stop" of its own (the script run)
    # while a rerun runs long
    what = title if title[1:2].isupper() else title[:1].lower() + title[1:]
    if stop.button(f"Stop {what}", key=f"{key}_stop", icon=":material/stop:",
                   disabled=s.state != RUNNING):
        job.stop()
        st.rerun()
    if again.button("Restart", key=f"{key}_restart", icon=":material/restart_alt:",
                    disabled=s.state == NOT_STARTED):
        try:
            (restart or job.restart)()
        except (KvvizError, ValueError, OSError) as exc:
            st.error(f"Cannot restart: {md(exc)}", icon=":material/error:")
            return s
        st.rerun()
    return s
