"""The Node page's Fleet tab: the nodes a Prometheus server scrapes, with their KV usage.
Remote names and notes are escaped text."""
from __future__ import annotations

import streamlit as st

from kvviz.core.errors import KvvizError
from kvviz.node import list_nodes
from kvviz.node.servers import USAGE_DEFINITION
from kvviz.node.trust import plain_markdown as md
from kvviz.viz import node as vn


def fleet_tab() -> None:
    url = st.text_input("Prometheus server", key="fleet_url",
                        placeholder="http://prometheus:9090")
    if st.button("List nodes", key="fleet_go", icon=":material/search:"):
        st.session_state["node_fleet"] = None
        try:
            st.session_state["node_fleet"] = (url, vn.fleet_table(list_nodes(url)))
        except (KvvizError, ValueError) as exc:
            st.error(f"Cannot list nodes from {md(repr(url))}: {md(exc)}",
                     icon=":material/error:")
    got = st.session_state.get("node_fleet")
    if got:
        st.caption(f"Nodes known to {md(got[0])}. KV usage: {USAGE_DEFINITION} The Node tab "
                   "uses the same definition. Where a cell says n/a, the notes below say why.")
        if got[1].empty:
            st.info("This Prometheus server scrapes no targets and has no KV series.")
        table = got[1]
        st.dataframe(table.drop(columns=["notes"]), hide_index=True, column_config={
            k: st.column_config.Column(help=vn.FLEET_HELP.get(k), width=w)
            for k, w in vn.FLEET_WIDTHS.items()})
        if not table.empty:  # remote names and notes: escaped, shown as text
            st.markdown("**Notes** (how KV usage was computed, why a cell says n/a)\n\n"
                        + "\n".join(f"- {md(r.job)} {md(r.instance)}: {md(r.notes)}"
                                     for r in table.itertuples()))


