"""Learn: fragmentation step by step, every picture taken from the real allocators."""
from __future__ import annotations

import streamlit as st

from kvviz import story
from kvviz.viz import learn as vl
from kvviz.viz import theme
from pages import frame

KEY = "learn_step"
SAMPLE = 400  # requests in the block-size sample


@st.cache_resource(show_spinner=False)
def steps() -> list[story.Step]:
    return story.build_story()


@st.cache_data(max_entries=4, show_spinner=False)
def tradeoff_points(num_requests: int = SAMPLE) -> list[story.TradeoffPoint]:
    return story.tradeoff(story.sample_lengths(num_requests))


def go_to(delta: int, count: int) -> None:
    st.session_state[KEY] = min(count - 1, max(0, st.session_state.get(KEY, 0) + delta))


def show_admission(adm, who: str, asked: int | None = None, block: int = 1) -> None:
    """The allocator's answer to admit(who, asked tokens); `need_tokens` is what it had to
    place: the tokens rounded up to whole blocks of `block` slots."""
    asked = adm.need_tokens if asked is None else asked
    rounded = ""
    if adm.need_tokens != asked:
        rounded = (f": {asked} tokens round up to {adm.need_tokens // block} blocks of "
                   f"{block} = {adm.need_tokens} slots")
    if adm.ok:
        st.success(f"admit({who}, {asked} tokens) → ok{rounded}")
        return
    st.error(f"admit({who}, {asked} tokens) → refused, reason **{adm.reason.value}**"
             f"{rounded}")
    c1, c2, c3 = st.columns(3)
    c1.metric("need", f"{adm.need_tokens} slots")
    c2.metric("free in total", f"{adm.free_tokens} slots")
    c3.metric("largest hole", f"{adm.largest_hole_tokens} slots")
    st.code(f"Admission(ok={adm.ok}, reason=Reason.{adm.reason.value},\n"
            f"          need_tokens={adm.need_tokens}, free_tokens={adm.free_tokens},\n"
            f"          largest_hole_tokens={adm.largest_hole_tokens})", language="python")


def show_tradeoff() -> None:
    pts = tradeoff_points()
    bs = st.select_slider("Block size (slots)", [p.block_size for p in pts], value=16)
    p = next(x for x in pts if x.block_size == bs)
    quiet = dict(delta_color="off", delta_arrow="off")
    c1, c2 = st.columns(2)
    c1.metric("tail waste", f"{p.tail_waste_tokens:,} slots",
              f"{100 * p.tail_share:.1f}% of capacity", **quiet)
    c2.metric("block-table entries", f"{p.table_entries:,}",
              f"{p.written_tokens / p.table_entries:.1f} slots per entry", **quiet)
    st.plotly_chart(vl.tradeoff_figure(pts, bs), key="learn_tradeoff")
    st.caption(f"{SAMPLE} sharegpt-like requests placed at their final length in a paged "
               "allocator sized to hold exactly their blocks, once per block size: capacity "
               "= the slots they hold, so shares are of that capacity.")


all_steps = steps()
n = len(all_steps)
i = min(st.session_state.setdefault(KEY, 0), n - 1)
step = all_steps[i]

frame.enter_through_app("pages/learn.py")
st.title("Learn: why KV caches fragment")
back, where, nxt = st.columns([1, 4, 1])
back.button("Back", on_click=go_to, args=(-1, n), disabled=i == 0, width="stretch")
where.progress((i + 1) / n, text=f"Step {i + 1} of {n}: {step.title}")
nxt.button("Next", on_click=go_to, args=(1, n), disabled=i == n - 1, width="stretch")

st.subheader(step.title)
if step.text:
    st.markdown(step.text)
names = story.NAMES
if step.line is not None:
    title = "Contiguous allocator" + (": D was refused" if step.paged is not None else "")
    st.plotly_chart(vl.slot_line_figure(step.line, names, title=title),
                    key=f"learn_line_{step.key}")
for k, (caption, bm) in enumerate(step.pictures):
    st.plotly_chart(vl.slot_line_figure(bm, step.names or {}, title=caption),
                    key=f"learn_pic_{step.key}_{k}")
if step.paged is not None:
    st.plotly_chart(vl.slot_line_figure(
        step.paged, names, title=f"Paged allocator, {step.paged.block_size} slots per block",
        table=step.table, table_owner=story.D_ID, tail_owner=step.tail_owner),
        key=f"learn_paged_{step.key}")
if step.line is not None or step.paged is not None or step.pictures:
    st.html(theme.legend_html())
    st.caption("The colours mean what they mean on Live; letters name the requests, a dark "
               "line separates neighbours. Hover a slot for its owner and state.")
if step.admission is not None:
    block = step.paged.block_size if step.paged is not None else (
        story.PAGE if step.pictures else 1)
    show_admission(step.admission, step.who, step.asked_tokens, block)
if step.key == "block-size":
    show_tradeoff()
if step.key == "questions":
    for q, a in story.QUESTIONS:
        with st.expander(q, expanded=True):
            st.markdown(a)
