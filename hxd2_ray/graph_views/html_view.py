"""A subgraph as one self-contained HTML page: an SVG drawing you can pan (drag) and zoom (wheel), with a detail
panel for the clicked entity or relation. It loads nothing from the network (no CDN: test and cluster machines
often have none); the positions come from the same layout as the PNG.

Data goes into the page as JSON inside a ``<script type="application/json">`` element with ``<``, ``>`` and
``&`` escaped, and the script puts every text into the page with ``textContent``/``setAttribute``, never as
markup, so a name or description cannot inject HTML or script.
"""

from __future__ import annotations

import html
import json
import os
import re
from typing import Any

from hxd2_ray.graph_views.draw import layout, short, to_networkx, type_colours
from hxd2_ray.graph_views.subgraph import Subgraph


def page_data(sub: Subgraph) -> dict[str, Any]:
    graph = to_networkx(sub)
    pos = layout(graph)
    colours = type_colours(sub)
    scale = 900.0
    nodes = [
        {
            "id": k,
            "name": graph.nodes[k]["name"],
            "label": short(graph.nodes[k]["name"], 28),
            "type": graph.nodes[k]["type"],
            "degree": graph.nodes[k]["degree"],
            "description": graph.nodes[k]["description"],
            "colour": colours[graph.nodes[k]["type"]],
            "center": k in sub.center,
            "sources": sub.sources.get(k, []),
            "x": round(pos[k][0] * scale, 1),
            "y": round(-pos[k][1] * scale, 1),
        }
        for k in graph.nodes
    ]
    edges = [
        {
            "source": a,
            "target": b,
            "keywords": graph.edges[a, b]["keywords"],
            "label": short(graph.edges[a, b]["keywords"][0], 22) if graph.edges[a, b]["keywords"] else "",
            "description": graph.edges[a, b]["description"],
            "weight": graph.edges[a, b]["weight"],
        }
        for a, b in graph.edges
    ]
    return {"title": sub.title, "nodes": nodes, "edges": edges, "types": colours}


def _json_for_script(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=True)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>__TITLE__</title>
<style>
  html, body { margin: 0; height: 100%; font: 14px system-ui, sans-serif; color: #222; }
  #top { padding: 8px 12px; border-bottom: 1px solid #ddd; }
  #top small { color: #666; }
  #main { display: flex; height: calc(100% - 58px); }
  #view { flex: 1; cursor: grab; background: #fcfcfc; }
  #view.dragging { cursor: grabbing; }
  #panel { width: 320px; padding: 10px 12px; border-left: 1px solid #ddd; overflow: auto; }
  #panel h3 { margin: 4px 0; }
  #panel p { white-space: pre-wrap; }  /* descriptions keep their line breaks */
  #panel blockquote { margin: 6px 0; padding: 4px 8px; border-left: 3px solid #ccc; background: #f7f7f7;
                      white-space: pre-wrap; font-size: 13px; }
  .legend span { display: inline-block; margin-right: 10px; }
  .legend i { display: inline-block; width: 10px; height: 10px; border-radius: 5px; margin-right: 4px; }
  text { pointer-events: none; }
</style>
</head>
<body>
<div id="top"><b id="title"></b><br>
  <small>Drag to pan, wheel to zoom, click an entity or a relation for details. Self-contained page: it loads
  nothing from the network.</small> <span class="legend" id="legend"></span></div>
<div id="main"><svg id="view"><g id="world"></g></svg><div id="panel"><p>Click an entity or a relation.</p></div></div>
<script type="application/json" id="graph-data">__DATA__</script>
<script>
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("graph-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var svg = document.getElementById("view"), world = document.getElementById("world");
  var panel = document.getElementById("panel");
  document.getElementById("title").textContent = data.title;
  var legend = document.getElementById("legend");
  Object.keys(data.types).forEach(function (t) {
    var s = document.createElement("span"), i = document.createElement("i");
    i.style.background = data.types[t]; s.appendChild(i); s.appendChild(document.createTextNode(t));
    legend.appendChild(s);
  });
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    parent.appendChild(e); return e;
  }
  function show(title, rows, sources) {
    panel.textContent = "";
    var h = document.createElement("h3"); h.textContent = title; panel.appendChild(h);
    rows.forEach(function (r) {
      var p = document.createElement("p"), b = document.createElement("b");
      b.textContent = r[0] + ": "; p.appendChild(b); p.appendChild(document.createTextNode(r[1]));
      panel.appendChild(p);
    });
    if (sources && sources.length) {
      var s = document.createElement("h4"); s.textContent = "Source chunks"; panel.appendChild(s);
      sources.forEach(function (c) {
        var who = document.createElement("small"); who.textContent = c.document + " \u00b7 " + c.id.slice(0, 12);
        var q = document.createElement("blockquote"); q.className = "source"; q.textContent = c.text;
        panel.appendChild(who); panel.appendChild(q);
      });
    }
  }
  var byId = {};
  data.nodes.forEach(function (n) { byId[n.id] = n; });
  var maxDeg = Math.max.apply(null, data.nodes.map(function (n) { return n.degree; }).concat([1]));
  data.edges.forEach(function (e) {
    var a = byId[e.source], b = byId[e.target];
    var line = el("line", {x1: a.x, y1: a.y, x2: b.x, y2: b.y, stroke: "#999",
                           "stroke-width": 1 + Math.min(4, e.weight / 3), "stroke-opacity": 0.7}, world);
    line.style.cursor = "pointer";
    line.addEventListener("click", function () {
      show(a.name + " \\u2014 " + b.name, [["keywords", e.keywords.join(", ")], ["weight", String(e.weight)],
                                           ["description", e.description]]);
    });
    if (e.label) {
      var t = el("text", {x: (a.x + b.x) / 2, y: (a.y + b.y) / 2, "font-size": 11, fill: "#6d4c41",
                          "text-anchor": "middle"}, world);
      t.textContent = e.label;
    }
  });
  data.nodes.forEach(function (n) {
    var r = 8 + 16 * Math.log(1 + n.degree) / Math.log(1 + maxDeg);
    var c = el("circle", {cx: n.x, cy: n.y, r: r, fill: n.colour, stroke: n.center ? "#c0392b" : "#fff",
                          "stroke-width": n.center ? 4 : 1.5}, world);
    c.style.cursor = "pointer";
    c.addEventListener("click", function () {
      show(n.name, [["type", n.type], ["degree", String(n.degree)], ["description", n.description]], n.sources);
    });
    var t = el("text", {x: n.x, y: n.y - r - 5, "font-size": n.center ? 15 : 13, "text-anchor": "middle",
                        "font-weight": n.center ? "bold" : "normal", fill: "#222"}, world);
    t.textContent = n.label;
  });
  // Pan and zoom: one transform on the world group.
  var view = {x: 0, y: 0, k: 1};
  function apply() {
    world.setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")");
  }
  function fit() {
    var box = world.getBBox(), w = svg.clientWidth, h = svg.clientHeight;
    if (!box.width || !box.height) { view = {x: w / 2, y: h / 2, k: 1}; apply(); return; }
    view.k = 0.9 * Math.min(w / box.width, h / box.height);
    view.x = w / 2 - view.k * (box.x + box.width / 2); view.y = h / 2 - view.k * (box.y + box.height / 2); apply();
  }
  svg.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var f = Math.exp(-ev.deltaY * 0.0015), rect = svg.getBoundingClientRect();
    var mx = ev.clientX - rect.left, my = ev.clientY - rect.top;
    view.x = mx - f * (mx - view.x); view.y = my - f * (my - view.y); view.k *= f; apply();
  }, {passive: false});
  var drag = null;
  svg.addEventListener("mousedown", function (ev) { drag = {x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y};
                                                      svg.classList.add("dragging"); });
  window.addEventListener("mousemove", function (ev) {
    if (!drag) return; view.x = drag.vx + ev.clientX - drag.x; view.y = drag.vy + ev.clientY - drag.y; apply();
  });
  window.addEventListener("mouseup", function () { drag = null; svg.classList.remove("dragging"); });
  window.addEventListener("resize", fit);
  fit();
})();
</script>
</body>
</html>
"""


def write_html(sub: Subgraph, path: str | os.PathLike[str]) -> dict[str, Any]:
    data = page_data(sub)
    values = {"TITLE": html.escape(sub.title), "DATA": _json_for_script(data)}
    page = re.sub("__(TITLE|DATA)__", lambda m: values[m.group(1)], _PAGE)  # one pass: no text is rescanned
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(page)
    return {"nodes": len(data["nodes"]), "edges": len(data["edges"])}
