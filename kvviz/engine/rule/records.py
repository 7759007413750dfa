"""How the compiled rule holds a lane's state: records of borrowed arrays (numba extension).

Python holds a lane's state as the Pool and Requests namedtuples of arrays and the Config
namedtuple of scalars (state.py). The rule reads them as records: `p.running`,
`req.num_tokens`, `cfg.block_size`, exactly as the tuples read. What a record is matters
only to the compiler, and only for speed:

- A tuple argument is passed by value (every array flattened into the call) and numba
  counts a reference to each of its arrays on entry and drops it on exit: an atomic
  increment and decrement per array per call (with Pool's 60 arrays, two thirds of a step,
  perf). A record is one pointer.
- numba's own records (StructRef) are still counted: the record per call, and each array
  read from one (perf: ~30% of a step with thousands running, in NRT_incref / NRT_decref).
  Here a record is a plain pointer to a struct that lives in the entry point's stack frame,
  and its fields are `BorrowedArray`s: numba arrays without a reference count (their
  meminfo is null and their type holds no managed pointer, so numba emits no counting).

That is safe because the entry points (advance.py, direct.py) are called from Python, which
holds the tuples, hence every array, for the whole call; a record never leaves the call
that made it. Interpreted (NUMBA_DISABLE_JIT=1), `records` returns the tuples themselves.
"""
from __future__ import annotations

import operator

from llvmlite import ir
from numba.core import cgutils, config, imputils, types
from numba.core.datamodel import models, register_default
from numba.core.extending import infer_getattr, intrinsic, lower_getattr_generic
from numba.core.imputils import lower_builtin
from numba.core.typing.templates import AttributeTemplate
from numba.np import arrayobj


class BorrowedArray(types.Array):
    """A numpy array whose owner outlives the compiled call: no reference counting."""

    def __init__(self, dtype, ndim, layout, readonly=False, aligned=True):
        super().__init__(dtype, ndim, layout, readonly=readonly, aligned=aligned,
                         name=f"borrowed array({dtype}, {ndim}d, {layout})")


@register_default(BorrowedArray)
class BorrowedArrayModel(models.StructModel):
    """numba's array layout with the meminfo as a plain pointer (never counted)."""

    def __init__(self, dmm, fe_type):
        members = [("meminfo", types.voidptr), ("parent", types.pyobject),
                   ("nitems", types.intp), ("itemsize", types.intp),
                   ("data", types.CPointer(fe_type.dtype)),
                   ("shape", types.UniTuple(types.intp, fe_type.ndim)),
                   ("strides", types.UniTuple(types.intp, fe_type.ndim))]
        super().__init__(dmm, fe_type, members)


def _item_pointer(context, builder, aryty, ary, idxty, idx):
    """The address of one element, indices as given: no wraparound of negative ones (the
    rule never indexes from the end; under NUMBA_BOUNDSCHECK=1 every index is checked, and
    a negative one raises IndexError)."""
    arr = context.make_array(aryty)(context, builder, ary)
    if isinstance(idxty, types.BaseTuple):
        inds = [context.cast(builder, v, t, types.intp) for v, t in
                zip(cgutils.unpack_tuple(builder, idx, len(idxty)), idxty.types)]
    else:
        inds = [context.cast(builder, idx, idxty, types.intp)]
    return cgutils.get_item_pointer2(
        context, builder, data=arr.data, shape=cgutils.unpack_tuple(builder, arr.shape),
        strides=cgutils.unpack_tuple(builder, arr.strides), layout=aryty.layout, inds=inds,
        wraparound=False, boundscheck=context.enable_boundscheck)


def _element(aryty, idxty) -> bool:
    """Whether `aryty[idxty]` names one element by integers (else numba's own indexing)."""
    if isinstance(idxty, types.Integer):
        return aryty.ndim == 1
    return (isinstance(idxty, types.BaseTuple) and len(idxty) == aryty.ndim
            and all(isinstance(t, types.Integer) for t in idxty.types))


@lower_builtin(operator.getitem, BorrowedArray, types.Integer)
@lower_builtin(operator.getitem, BorrowedArray, types.BaseTuple)
def _getitem(context, builder, sig, args):
    aryty, idxty = sig.args
    if not _element(aryty, idxty):
        return arrayobj.getitem_array_tuple(context, builder, sig, args) if isinstance(
            idxty, types.BaseTuple) else arrayobj.getitem_arraynd_intp(context, builder, sig,
                                                                     args)
    ptr = _item_pointer(context, builder, aryty, args[0], idxty, args[1])
    return arrayobj.load_item(context, builder, aryty, ptr)


@lower_builtin(operator.setitem, BorrowedArray, types.Integer, types.Any)
@lower_builtin(operator.setitem, BorrowedArray, types.BaseTuple, types.Any)
def _setitem(context, builder, sig, args):
    aryty, idxty, valty = sig.args
    if not _element(aryty, idxty) or isinstance(valty, types.Array):
        return arrayobj.setitem_array(context, builder, sig, args)
    ptr = _item_pointer(context, builder, aryty, args[0], idxty, args[1])
    val = context.cast(builder, args[2], valty, aryty.dtype)
    arrayobj.store_item(context, builder, aryty, val, ptr)
    return context.get_dummy_value()


def borrowed(t: types.Array) -> BorrowedArray:
    return BorrowedArray(t.dtype, t.ndim, t.layout, readonly=not t.mutable,
                         aligned=t.aligned)


class RecordType(types.Type):
    """A pointer to a struct of borrowed arrays (and scalars: Config), read by field name."""

    def __init__(self, label: str, fields: tuple):
        self.fields = fields  # ((name, BorrowedArray or scalar type), ...)
        self.index = {name: i for i, (name, _) in enumerate(fields)}
        super().__init__(name=f"{label}({', '.join(f'{n}: {t}' for n, t in fields)})")


@register_default(RecordType)
class RecordModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        payload = ir.LiteralStructType([dmm.lookup(t).get_data_type()
                                        for _, t in fe_type.fields])
        super().__init__(dmm, fe_type, payload.as_pointer())


@infer_getattr
class _RecordAttribute(AttributeTemplate):
    key = RecordType

    def generic_resolve(self, typ, attr):
        if attr in typ.index:
            return typ.fields[typ.index[attr]][1]


@lower_getattr_generic(RecordType)
def _record_getattr(context, builder, typ, val, attr):
    """A field's value, loaded as invariant: a record's fields never change while it lives,
    so the compiler may keep them in registers across the stores the rule makes into its
    arrays (without it, every store into an int64 array may alias a field's shape or data
    pointer, and the next access reloads them)."""
    ftype = typ.fields[typ.index[attr]][1]
    ptr = cgutils.gep_inbounds(builder, val, 0, typ.index[attr])
    load = builder.load(ptr)
    load.set_metadata("invariant.load", builder.module.add_metadata([]))
    value = context.data_model_manager[ftype].from_data(builder, load)
    return imputils.impl_ret_borrowed(context, builder, ftype, value)


def _field_type(t):
    return borrowed(t) if isinstance(t, types.Array) else t


def _record_type(tuple_type, label):
    return RecordType(label, tuple((name, _field_type(t)) for name, t in
                                   zip(tuple_type.fields, tuple_type.types)))


def _record_of(context, builder, rtype, tuple_type, value):
    """A record of type `rtype` over namedtuple `value`'s fields, in the caller's stack
    frame: its arrays borrowed (meminfo null), its scalars copied."""
    payload = context.data_model_manager[rtype].get_value_type().pointee
    ptr = cgutils.alloca_once(builder, payload)
    for i, (_, ftype) in enumerate(rtype.fields):
        v = builder.extract_value(value, i)
        if isinstance(ftype, BorrowedArray):
            ary = context.make_array(tuple_type.types[i])(context, builder, v)
            mine = context.make_array(ftype)(context, builder)
            for member in ("parent", "nitems", "itemsize", "data", "shape", "strides"):
                setattr(mine, member, getattr(ary, member))
            mine.meminfo = cgutils.get_null_value(mine.meminfo.type)
            v = mine._getvalue()
        dm = context.data_model_manager[ftype]
        builder.store(dm.as_data(builder, v), cgutils.gep_inbounds(builder, ptr, 0, i))
    # A fence: the record's pointer as an opaque asm passes it on, after the stores above
    # and with memory clobbered, so no invariant load of a field (_record_getattr) can be
    # moved before the field is written.
    fence = ir.FunctionType(ptr.type, [ptr.type])
    return builder.asm(fence, "", "=r,0,~{memory}", [ptr], side_effect=True)


if config.DISABLE_JIT:  # interpreted: the namedtuples themselves
    def records(p, cfg, req):
        return p, cfg, req
else:
    @intrinsic
    def records(typingctx, p, cfg, req):
        """(Pool, Config, Requests) as records over the same arrays (and Config's
        scalars), valid until the calling function returns."""
        rtypes = (_record_type(p, "PoolRecord"), _record_type(cfg, "ConfigRecord"),
                  _record_type(req, "RequestsRecord"))

        def codegen(context, builder, sig, args):
            ptrs = [_record_of(context, builder, r, t, v)
                    for r, t, v in zip(rtypes, sig.args, args)]
            return context.make_tuple(builder, sig.return_type, ptrs)
        return types.Tuple(rtypes)(p, cfg, req), codegen
