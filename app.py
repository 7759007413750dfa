"""kvviz dashboard: `streamlit run app.py` (binds 127.0.0.1, see .streamlit/config.toml)."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

HERE = Path(__file__).parent
# (file, title, icon): registered only when the file exists, so the app runs at every stage.
PAGES = [
    ("pages/live.py", "Live", ":material/monitor_heart:"),
    ("pages/compare.py", "Compare", ":material/compare:"),
    ("pages/learn.py", "Learn", ":material/school:"),
    ("pages/replay.py", "Replay", ":material/replay:"),
    ("pages/gpu.py", "GPU", ":material/memory:"),
    ("pages/node.py", "Node", ":material/dns:"),
    ("pages/kvevents.py", "KV events", ":material/account_tree:"),
]

st.set_page_config(page_title="kvviz", page_icon=":material/grid_view:", layout="wide")
found = [(f, t, i) for f, t, i in PAGES if (HERE / f).is_file()]
nav = st.navigation([st.Page(f, title=t, icon=i, default=k == 0)
                     for k, (f, t, i) in enumerate(found)])
st.sidebar.markdown("**kvviz**: KV-cache fragmentation observatory")
wanted = st.session_state.pop("kvviz_wanted_page", None)  # see pages/common.enter_through_app
if wanted in {f for f, _, _ in found}:
    st.switch_page(wanted)
nav.run()
