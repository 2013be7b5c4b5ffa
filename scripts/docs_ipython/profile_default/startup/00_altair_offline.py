# IPython startup file for executing the notebooks that become the documentation pages.
# Used by scripts/docs.sh, scripts/test.sh and tests/test_docs.py through IPYTHONDIR=scripts/docs_ipython
# (nbdev-test and nbdev-proc-nbs load the IPython profile by default: nbdev's `exec_profile`).
#
# Altair's default renderer makes each chart fetch vega / vega-lite / vega-embed from a CDN when the
# page opens: a page built that way shows no charts offline. The pages are drawn by the package's own
# offline renderer instead (`sgatlin_nb.runs.chart_html`, derived on nbs/06a_runs.ipynb: the first chart
# of a kernel carries the vega-embed bundle that vl-convert ships, every chart is a <div> and a call to
# `vegaEmbed`, and a chart that cannot be drawn shows its error in red). nbdev-test runs the pages
# without a Jupyter kernel, where importing the package leaves Altair's renderer alone: enabled here.
# The startup files run again for every notebook, while the package stays imported in nbdev-test's worker: each page is
# an HTML document of its own, so its first chart must load the bundle again. It loads it from one file beside the pages,
# vega-bundle.js, written here into the folder the notebooks run in (nbs/ of the executed copy) by `use_bundle_file`:
# nbdev's processing copies it with the notebooks, _quarto.yml names it a resource of the site, and tests/test_docs.py
# puts it beside the pages it renders. A site then carries one copy of the 0.9 MB bundle instead of one per page.
import sgatlin_nb.runs as _runs

_runs._first_chart = None
_runs.use_bundle_file('.')
_runs.offline_charts(force=True)
