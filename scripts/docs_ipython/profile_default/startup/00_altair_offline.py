# IPython startup file for executing the notebooks that become the documentation pages.
# Used by scripts/docs.sh, scripts/test.sh and tests/test_docs.py through IPYTHONDIR=scripts/docs_ipython
# (nbdev-test and nbdev-proc-nbs load the IPython profile by default: nbdev's `exec_profile`).
#
# Altair's default renderer makes each chart fetch vega / vega-lite / vega-embed from a CDN when the
# page opens. A page built that way shows no charts offline, and depends on the CDN forever. This
# renderer makes every page self-contained instead: the first chart a kernel displays carries the
# vega-embed bundle that vl-convert ships (the same one altair's 'inline' HTML template uses), and
# every chart is a <div> plus a call to `vegaEmbed`, so charts keep their tooltips. A chart that
# cannot be drawn shows its error in red where the chart would be, never a blank space.
# Frontends may format one result twice and keep only the last (execnb, which nbdev-test uses, does):
# so the bundle goes with every rendering of the first chart's spec, not with the first call.
import json, uuid

import altair as alt
import vl_convert
from altair.utils._importers import vl_version_for_vl_convert

_first_spec = None  # the JSON of the first chart this kernel displayed

def _offline_html(spec, **_metadata):
    "Mimebundle for `spec`: a div drawn by vega-embed, the library inlined with the kernel's first chart"
    global _first_spec
    div = f"altair-{uuid.uuid4().hex}"
    spec_js = json.dumps(spec).replace("</", "<\\/")
    if _first_spec is None: _first_spec = spec_js
    lib = ""
    if spec_js == _first_spec:
        js = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())
        # An arrow-function scope keeps the bundle's top-level names out of the page's global scope.
        lib = f'<script type="text/javascript">if (!window.vegaEmbed) {{ (() => {{\n{js}\n}})(); }}</script>\n'
    html = f"""{lib}<div class="altair-offline" id="{div}"></div>
<script type="text/javascript">
(() => {{
  const el = document.getElementById("{div}");
  const fail = (err) => {{
    el.innerHTML = '<div class="error" style="color:red;">Chart error: ' + String(err).replace(/</g, "&lt;") + '</div>';
  }};
  if (!window.vegaEmbed) {{ fail("vega-embed is not loaded (this page was built without its first chart output)"); return; }}
  window.vegaEmbed(el, {spec_js}, {{"mode": "vega-lite"}}).catch(fail);
}})();
</script>"""
    return {"text/html": html}

alt.renderers.register("offline", _offline_html)
alt.renderers.enable("offline")
