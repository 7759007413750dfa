"""kvviz dashboard: `streamlit run app.py` (binds 127.0.0.1, see .streamlit/config.toml).

Every script run goes through this file, so the Host check (DNS rebinding, see
kvviz.node.trust and README "Security") here guards every page and every widget action."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from kvviz.node.trust import dashboard_host_ok
from kvviz.node.trust import plain_markdown as md
from kvviz.viz import glossary
from pages.frame import mark_framed

HERE = Path(__file__).parent
# (file, title, icon); the first is the default page. Helper modules in pages/ are not pages.
PAGES = [
    ("pages/live.py", "Live", ":material/monitor_heart:"),
    ("pages/compare.py", "Compare", ":material/compare:"),
    ("pages/learn.py", "Learn", ":material/school:"),
    ("pages/replay.py", "Replay", ":material/replay:"),
    ("pages/gpu.py", "GPU", ":material/memory:"),
    ("pages/node.py", "Node", ":material/dns:"),
]

# A local file, not a ":material/..." name: Streamlit turns those into a favicon URL on a
# font CDN, and the dashboard fetches nothing from outside 127.0.0.1 (README, Security).
st.set_page_config(page_title="kvviz", page_icon=str(HERE / "assets" / "favicon.png"),
                   layout="wide")
nav = st.navigation([st.Page(f, title=t, icon=i, default=k == 0)
                     for k, (f, t, i) in enumerate(PAGES)])
host = st.context.headers.get("host")
if not dashboard_host_ok(host, server_address=st.get_option("server.address"),
                         extra=st.get_option("server.allowedHosts") or ()):
    st.error(f"Refused: this dashboard does not answer to the host name {md(host)}. If you "
             "reach it through that name on purpose, start it with "
             "`--server.allowedHosts NAME` (README, Security).", icon=":material/gpp_bad:")
    st.stop()
# A lane's whole name in the sidebar's chips ("contiguous:first-fit:pow2" and "...:max" would
# both read "contiguous:first-fit:..."): the chip wraps its text instead of cutting it.
st.html("<style>[data-testid=stMultiSelectTagsContainer] span:has(> span[title])"
        "{height:auto;max-width:100%}[data-testid=stMultiSelectTagsContainer] span[title]"
        "{white-space:normal;overflow-wrap:anywhere;text-overflow:clip;line-height:1.2;"
        "padding:2px 0}</style>")
st.sidebar.markdown("**kvviz**: KV-cache fragmentation observatory")
with st.sidebar.expander("Glossary: the words every page uses", icon=":material/menu_book:"):
    st.markdown(glossary.markdown())
wanted = mark_framed()  # a direct link's page, on a fresh server (pages/frame.py)
if wanted in {f for f, _, _ in PAGES}:
    st.switch_page(wanted)
nav.run()
