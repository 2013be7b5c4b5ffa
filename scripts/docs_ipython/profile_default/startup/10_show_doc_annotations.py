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


# Class signatures, NamedTuple fields, `__main__.` and private module paths in annotations: the package's own
# show_doc renderer mends those (sgatlin_nb.docs.SiteRenderer, named in pyproject.toml; nbs/93_docs.ipynb), so
# they read the same in JupyterLab as on the site.

# Every entry's `[source]` link opens the site's own page of its module (the project names no public repository):
# the pages are written once into source/ of the folder the notebooks run in (nbs/ of the executed copy), beside
# vega-bundle.js; nbdev's processing copies them with the notebooks and _quarto.yml names the folder a resource.
from sgatlin_nb.docs import write_source_pages as _write_source_pages

_write_source_pages()
