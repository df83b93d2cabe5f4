// A small force layout drawn as SVG: the graph view of /v1/indexes/{index}/graph (at most a few hundred nodes).
// Positions start on a spiral (the same picture for the same graph), then nodes repel each other, relations pull
// their ends together and a weak pull keeps everything near the middle, while the steps shrink.
"use strict";

const ForceGraph = (() => {
  const SVG = "http://www.w3.org/2000/svg";
  const STEPS = 300;
  const LABEL_CHARS = 28;
  const MOST_ZOOM = 1.35;
  const GOLDEN_ANGLE = Math.PI * (3 - Math.sqrt(5));

  function layout(nodes, edges) {
    const n = nodes.length;
    const spacing = 90;
    const ideal = spacing;  // the length a relation settles at
    const pos = nodes.map((_, i) => {
      const r = spacing * Math.sqrt(i + 0.5);
      return { x: r * Math.cos(i * GOLDEN_ANGLE), y: r * Math.sin(i * GOLDEN_ANGLE) };
    });
    const index = new Map(nodes.map((node, i) => [node.key, i]));
    const links = edges.map((edge) => ({ a: index.get(edge.source), b: index.get(edge.target), edge }))
      .filter(({ a, b }) => a !== undefined && b !== undefined && a !== b);
    let step = spacing;
    for (let round = 0; round < STEPS; round++) {
      const force = pos.map(() => ({ x: 0, y: 0 }));
      for (let i = 0; i < n; i++) {
        for (let j = i + 1; j < n; j++) {
          let dx = pos[i].x - pos[j].x;
          let dy = pos[i].y - pos[j].y;
          let d2 = dx * dx + dy * dy;
          if (d2 < 0.01) { dx = 0.1 * (i - j); dy = 0.1; d2 = dx * dx + dy * dy; }
          const push = (ideal * ideal) / d2;
          force[i].x += dx * push; force[i].y += dy * push;
          force[j].x -= dx * push; force[j].y -= dy * push;
        }
      }
      for (const { a, b } of links) {
        const dx = pos[b].x - pos[a].x;
        const dy = pos[b].y - pos[a].y;
        const d = Math.sqrt(dx * dx + dy * dy) || 0.1;
        const pull = d / ideal;
        force[a].x += dx * pull; force[a].y += dy * pull;
        force[b].x -= dx * pull; force[b].y -= dy * pull;
      }
      for (let i = 0; i < n; i++) {
        force[i].x -= pos[i].x * 0.02;
        force[i].y -= pos[i].y * 0.02;
        const size = Math.sqrt(force[i].x * force[i].x + force[i].y * force[i].y) || 1;
        const move = Math.min(size, step);
        pos[i].x += (force[i].x / size) * move;
        pos[i].y += (force[i].y / size) * move;
      }
      step = Math.max(0.5, step * 0.985);
    }
    return { pos, links };
  }

  function make(tag, attrs, parent) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    if (parent) parent.appendChild(node);
    return node;
  }

  function radius(node) {
    return 6 + Math.min(10, 2.2 * Math.log2(1 + (node.degree || 0)));
  }

  function short(text, most) {
    return text.length <= most ? text : text.slice(0, most - 1) + "…";
  }

  // Draw `view` ({nodes, edges, center}) into `svg`; onSelect(node, itsEdges) when a node is clicked.
  function draw(svg, view, onSelect) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const nodes = view.nodes || [];
    if (!nodes.length) return;
    const { pos, links } = layout(nodes, view.edges || []);
    const centre = new Set(view.center || []);
    // The box around every node and its label (about 6.5 px a character at 11 px), at least the drawing's size
    // over MOST_ZOOM: a small graph is drawn a little larger, its text still a text's size; a large one shrinks
    // to fit.
    const pad = 16;
    let [left, top, right, bottom] = [Infinity, Infinity, -Infinity, -Infinity];
    nodes.forEach((node, i) => {
      const r = radius(node);
      left = Math.min(left, pos[i].x - r);
      right = Math.max(right, pos[i].x + r + 4 + 6.5 * short(node.name, LABEL_CHARS).length);
      top = Math.min(top, pos[i].y - r);
      bottom = Math.max(bottom, pos[i].y + r);
    });
    const width = Math.max(right - left + 2 * pad, (svg.clientWidth || 0) / MOST_ZOOM);
    const height = Math.max(bottom - top + 2 * pad, (svg.clientHeight || 0) / MOST_ZOOM);
    const x0 = (left + right) / 2 - width / 2;
    const y0 = (top + bottom) / 2 - height / 2;
    svg.setAttribute("viewBox", `${x0.toFixed(1)} ${y0.toFixed(1)} ${width.toFixed(1)} ${height.toFixed(1)}`);

    const edgeLayer = make("g", { class: "edges" }, svg);
    const nodeLayer = make("g", { class: "nodes" }, svg);
    const edgeLines = links.map(({ a, b, edge }) => {
      const line = make("line", { x1: pos[a].x, y1: pos[a].y, x2: pos[b].x, y2: pos[b].y, class: "edge" }, edgeLayer);
      if (edge.description) make("title", {}, line).textContent = edge.description;
      return { line, a, b };
    });
    const groups = nodes.map((node, i) => {
      const group = make("g", {
        class: "node" + (centre.has(node.key) ? " centre" : "") + ` hops-${Math.min(node.hops, 2)}`,
        transform: `translate(${pos[i].x.toFixed(1)},${pos[i].y.toFixed(1)})`,
        tabindex: 0,
        "data-key": node.key,
      }, nodeLayer);
      make("circle", { r: radius(node) }, group);
      const label = make("text", { x: radius(node) + 4, y: 4 }, group);
      label.textContent = short(node.name, LABEL_CHARS);
      make("title", {}, group).textContent = `${node.name} (${node.type || "entity"}, degree ${node.degree})`;
      const select = () => {
        for (const g of groups) g.classList.remove("selected");
        group.classList.add("selected");
        for (const e of edgeLines) e.line.classList.toggle("lit", e.a === i || e.b === i);
        const own = (view.edges || []).filter((e) => e.source === node.key || e.target === node.key);
        if (onSelect) onSelect(node, own);
      };
      group.addEventListener("click", select);
      group.addEventListener("keydown", (event) => { if (event.key === "Enter") select(); });
      return group;
    });
  }

  return { draw, layout };
})();

window.ForceGraph = ForceGraph;
