# IPython startup file for the documentation build (see 00_altair_offline.py for how it is used).
#
# nbdev's docs processing (nbdev-proc-nbs, nbdev-docs) runs `show_doc` right after each exported cell,
# and fastcore evaluates the signature's string annotations there. Two kinds cannot be evaluated yet,
# and raise NameError where fastcore only expects ValueError/TypeError: a forward reference to a class
# defined further down the notebook (`-> 'CircuitDB'` in 10_record), and flax 0.12's annotation `Any`
# on the metaclass of every nnx.Module (its module never imports the name). Such a signature keeps its
# annotations as written; the documented parameters (fastcore's docments) are unaffected.
import inspect

import fastcore.docments


def _signature(obj, *args, eval_str=False, **kwargs):
    "inspect.signature, with annotations left as written when evaluating them names something undefined"
    try:
        return inspect.signature(obj, *args, eval_str=eval_str, **kwargs)
    except NameError:
        return inspect.signature(obj, *args, **kwargs)


fastcore.docments.signature = _signature


# nbdev runs a page's exported code as `__main__`, so an annotation naming a class the page defines itself reads
# `__main__.Gates` in the signature, and jax's array type reads by its private home `jax.jaxlib._jax.Array`. The
# entries name them as a reader imports them: `Gates` (from the page's module) and `jax.Array`.
import re

_type_str = fastcore.docments._type_str


def _public_type_str(anno):
    "fastcore's annotation text, with the page's own classes and jax's array type named as a reader imports them"
    s = _type_str(anno)
    return re.sub(r"\b__main__\.", "", s).replace("jax.jaxlib._jax.Array", "jax.Array").replace("jaxlib._jax.Array", "jax.Array")


fastcore.docments._type_str = _public_type_str


# fastcore documents a class through its `__init__`; a NamedTuple (`Gates`, `TopK`, `BigO`, ...) has only tuple's,
# so its entry read `def Gates(*args, **kwargs)`. Its fields are its signature, as a dataclass's are.
from inspect import Parameter, isclass

_docments = fastcore.docments.docments


def _namedtuple_docments(s, *args, **kwargs):
    "fastcore's docments; a NamedTuple class is documented by its fields instead of tuple's (*args, **kwargs)"
    if isclass(s) and issubclass(s, tuple) and hasattr(s, "_fields"):
        def fields(self, *a, **k): pass
        sig = inspect.signature(s)
        fields.__signature__ = sig.replace(parameters=[Parameter("self", Parameter.POSITIONAL_OR_KEYWORD), *sig.parameters.values()])
        fields.__name__ = fields.__qualname__ = s.__name__
        return _docments(fields, *args, **kwargs)
    return _docments(s, *args, **kwargs)


fastcore.docments.docments = _namedtuple_docments
