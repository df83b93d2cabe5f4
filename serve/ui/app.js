// The web UI of hxd2 serve: ask a question, watch the answer stream (the OpenAI-compatible route, as server-sent
// events), open its references, read its trace, see the graph around the entities it used, and the index's stats.
// Every text from the server is put in the page as text (textContent), never as markup.
"use strict";

(() => {
  const KEY_STORAGE = "hxd2.apiKey";
  const WRONG_KEY = "Wrong or missing API key: enter the server's key above and press Use key.";
  const GRAPH_ENTITIES = 8;
  const $ = (id) => document.getElementById(id);

  // The page lives at <prefix>/ui/: the API is one level up, whatever the prefix.
  const apiBase = new URL("../", window.location.href);
  const apiUrl = (path) => new URL(path, apiBase).toString();

  let asking = null;  // the AbortController of the question being streamed

  // ------------------------------------------------------------------------------------------ helpers

  function el(tag, props = {}, children = []) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props)) {
      if (name === "text") node.textContent = value;
      else if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value);
    }
    for (const child of children) if (child) node.appendChild(child);
    return node;
  }

  function replace(node, ...children) {
    node.replaceChildren(...children.filter(Boolean));
  }

  const number = (value) => (typeof value === "number" ? value.toLocaleString("en-US") : String(value ?? "–"));
  const ms = (value) => (value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${value.toFixed(1)} ms`);

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function authHeaders(extra = {}) {
    const key = sessionStorage.getItem(KEY_STORAGE);
    return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
  }

  async function errorOf(response) {
    if (response.status === 401) return new ApiError(401, WRONG_KEY);
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && body.error && body.error.message) message = body.error.message;
    } catch (_) { /* not JSON: the status line says it */ }
    return new ApiError(response.status, message);
  }

  async function getJson(path) {
    const response = await fetch(apiUrl(path), { headers: authHeaders() });
    if (!response.ok) throw await errorOf(response);
    return response.json();
  }

  function notify(message) {
    const notice = $("notice");
    notice.textContent = message || "";
    notice.hidden = !message;
  }

  function failed(error) {
    if (error.name === "AbortError") return;
    notify(error.message || String(error));
    if (error.status === 401) {
      $("api-key").classList.add("invalid");
      $("connection").textContent = "not signed in";
    }
  }

  // ------------------------------------------------------------------------------------ key and index

  function listIndexes(names) {
    const select = $("index");
    const chosen = select.value;
    replace(select, ...names.map((name) => el("option", { value: name, text: name })));
    if (names.includes(chosen)) select.value = chosen;
  }

  async function connect() {
    notify("");
    $("api-key").classList.remove("invalid");
    try {
      // The served indexes are public (the health check names them); reading them needs the key.
      if (!$("index").options.length) listIndexes((await getJson("healthz")).indexes || []);
      const models = await getJson("v1/models");
      listIndexes(models.data.map((m) => m.id));
      $("connection").textContent = sessionStorage.getItem(KEY_STORAGE) ? "key accepted" : "connected";
      await loadStats();
    } catch (error) {
      if (error.status === 401) replace($("stats"), el("p", { class: "muted", text: "The index's statistics need the API key." }));
      failed(error);
    }
  }

  function saveKey(event) {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
    connect();
  }

  // ------------------------------------------------------------------------------------------- asking

  async function ask(event) {
    event.preventDefault();
    const question = $("question").value.trim();
    const index = $("index").value;
    if (!question || !index) return;
    if (asking) asking.abort();
    asking = new AbortController();
    const mine = asking;
    notify("");
    const answer = $("answer");
    replace(answer);
    answer.classList.remove("done");
    answer.classList.add("streaming");
    replace($("answer-meta"));
    replace($("references"), el("li", { class: "muted placeholder", text: "Waiting for the answer…" }));
    $("answer-state").textContent = "streaming…";
    $("ask").disabled = true;
    $("stop").disabled = false;
    const body = { model: index, stream: true, trace: true, messages: [{ role: "user", content: question }] };
    if ($("mode").value) body.mode = $("mode").value;
    const started = performance.now();
    try {
      const response = await fetch(apiUrl("v1/chat/completions"), {
        method: "POST", headers: authHeaders({ "Content-Type": "application/json" }), body: JSON.stringify(body),
        signal: mine.signal,
      });
      if (!response.ok) throw await errorOf(response);
      let final = null;
      await readEvents(response, (data) => {
        if (data.error) throw new ApiError(data.error.code || 500, data.error.message);
        const choice = data.choices && data.choices[0];
        if (!choice) return;
        if (choice.delta && choice.delta.content) answer.append(choice.delta.content);
        if (choice.finish_reason) final = data;
      });
      if (!final) throw new ApiError(502, "the answer stream ended before the answer was complete");
      $("answer-state").textContent = `done in ${ms(performance.now() - started)}`;
      answer.classList.add("done");  // tests wait for it: the whole answer is on the page
      showFinal(index, final);
    } catch (error) {
      $("answer-state").textContent = error.name === "AbortError" ? "stopped" : "failed";
      failed(error);
    } finally {
      if (asking === mine) asking = null;
      answer.classList.remove("streaming");
      $("ask").disabled = false;
      $("stop").disabled = true;
    }
  }

  // Server-sent events, one `data:` line each; calls onData with each parsed event until `data: [DONE]`.
  async function readEvents(response, onData) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = event.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).trimStart()).join("\n");
        if (data === "[DONE]") { reader.cancel(); return; }
        if (data) onData(JSON.parse(data));
      }
    }
  }

  function showFinal(index, final) {
    const trace = final.trace || {};
    const tags = [["path", final.path], ["mode", final.mode], ["fallback", final.fallback_reason]];
    replace($("answer-meta"), ...tags.filter(([, v]) => v).map(([k, v]) => el("span", { class: "tag", text: `${k}: ${v}` })));
    showReferences(index, final.references || []);
    showTrace(final, trace);
    const entities = entitiesOf(trace);
    if (entities.length) drawGraph(index, entities);
    else showGraphMessage("The answer used no entity of the graph.");
  }

  // ------------------------------------------------------------------------------------- references

  function showReferences(index, references) {
    if (!references.length) {
      replace($("references"), el("li", { class: "muted placeholder", text: "No references: the answer used no document." }));
      return;
    }
    replace($("references"), ...references.map((ref) => {
      // "report.pdf, page 2": a PDF's, deck's, workbook's or book's chunks name where they sit in the file
      const locations = ref.locations || [];
      const where = [...new Set(locations.filter(Boolean))].join(", ");
      const file = (ref.source_path || "").split("/").pop();
      return el("li", { class: "reference" }, [
        el("div", { class: "ref-title", text: ref.title || ref.source_id || ref.doc_id }),
        el("div", { class: "muted small", text: where ? `${file}, ${where}` : (ref.source_path || ref.source_id || "") }),
        el("div", { class: "chips" }, (ref.chunk_ids || []).map((id, i) => el("button", {
          type: "button", class: "chip", title: `chunk ${id}`, "data-chunk": id,
          text: locations[i] || `chunk ${i + 1}`, onclick: () => openChunk(index, id),
        }))),
      ]);
    }));
  }

  async function openChunk(index, chunkId) {
    try {
      const chunk = await getJson(`v1/indexes/${encodeURIComponent(index)}/chunks/${encodeURIComponent(chunkId)}`);
      $("reader-title").textContent = chunk.doc_title || chunk.doc_source_id || "Chunk";
      const where = [chunk.doc_source_path || chunk.doc_source_id, chunk.header_path, `chunk ${chunk.order + 1}`];
      $("reader-meta").textContent = where.filter(Boolean).join(" · ");
      $("reader-text").textContent = chunk.text;
      const reader = $("reader");
      if (!reader.open) reader.showModal();
    } catch (error) {
      failed(error);
    }
  }

  // ------------------------------------------------------------------------------------------ trace

  function showTrace(final, trace) {
    const rows = [
      ["Path", final.path],
      ["Why", trace.path_reason],
      ["Fallback", final.fallback_reason || trace.fallback_reason],
      ["Mode", final.mode],
      ["Keywords", trace.keywords && [...(trace.keywords.low_level || []), ...(trace.keywords.high_level || [])].join(", ")],
      ["Tokens", trace.tokens_total && `${number(trace.tokens_total.prompt)} in, ${number(trace.tokens_total.completion)} out`],
    ].filter(([, value]) => value);
    const facts = el("dl", { class: "facts" });
    for (const [name, value] of rows) facts.append(el("dt", { text: name }), el("dd", { text: String(value) }));
    const timings = trace.timings_ms || {};
    const total = timings.total || Math.max(1, ...Object.values(timings));
    const stages = Object.entries(timings).filter(([name]) => name !== "total");
    const bars = el("div", { class: "stages" }, stages.map(([name, value]) => el("div", { class: "stage" }, [
      el("span", { class: "stage-name", text: name }),
      el("span", { class: "stage-bar" }, [barOf(value / total)]),
      el("span", { class: "stage-ms", text: ms(value) }),
    ])));
    const raw = el("details", {}, [el("summary", { text: "whole trace (JSON)" }),
      el("pre", { class: "raw", text: JSON.stringify(trace, null, 2) })]);
    replace($("trace"), facts, el("h3", { text: `Stages · total ${ms(total)}` }), bars, raw);
  }

  function barOf(share) {
    const bar = el("span", { class: "fill" });
    bar.style.width = `${Math.max(1, Math.min(100, share * 100)).toFixed(1)}%`;
    return bar;
  }

  // ------------------------------------------------------------------------------------------ graph

  // The entities the answer used: those dual-level retrieval put in its context, and those the logic form's
  // steps looked up or found.
  function entitiesOf(trace) {
    const names = [];
    const add = (name) => {
      if (typeof name === "string" && name.trim() && !names.includes(name)) names.push(name);
    };
    for (const entity of (trace.retrieval && trace.retrieval.entities) || []) add(entity.key || entity.name);
    const steps = (trace.logic && trace.logic.evidence && trace.logic.evidence.steps) || [];
    for (const step of steps) {
      for (const query of step.queries || []) for (const key of (query.params && query.params.keys) || []) add(key);
      if (step.value && step.value.kind === "entities") for (const key of step.value.keys || []) add(key);
    }
    return names.slice(0, GRAPH_ENTITIES);
  }

  function showGraphMessage(message) {
    replace($("graph"));
    $("graph-title").textContent = "";
    $("graph-detail").textContent = message;
  }

  async function drawGraph(index, entities) {
    const query = entities.map((name) => `entity=${encodeURIComponent(name)}`).join("&");
    try {
      const view = await getJson(`v1/indexes/${encodeURIComponent(index)}/graph?${query}&hops=1&max_nodes=40`);
      $("graph-title").textContent = `· ${view.nodes.length} entities, ${view.edges.length} relations` +
        (view.not_shown ? ` (${view.not_shown} more not shown)` : "");
      ForceGraph.draw($("graph"), view, showEntity);
      $("graph-detail").textContent = "Click an entity to read it; the darker dots are the entities the answer used.";
    } catch (error) {
      if (error.status === 404) showGraphMessage("None of the answer's entities is in the graph.");
      else failed(error);
    }
  }

  function showEntity(node, edges) {
    const names = new Map();
    for (const circle of $("graph").querySelectorAll("g.node")) {
      names.set(circle.dataset.key, circle.querySelector("text").textContent);
    }
    const related = edges.map((e) => {
      const other = e.source === node.key ? e.target : e.source;
      return el("li", { text: `${names.get(other) || other}${e.description ? ": " + e.description : ""}` });
    });
    replace($("graph-detail"),
      el("div", { class: "entity-name", text: `${node.name} · ${node.type || "entity"} · degree ${node.degree}` }),
      node.description ? el("p", { text: node.description }) : null,
      related.length ? el("ul", { class: "relations" }, related) : null,
      el("button", { type: "button", class: "secondary small", text: "Around this entity",
        onclick: () => drawGraph($("index").value, [node.key]) }));
  }

  // ------------------------------------------------------------------------------------------ stats

  async function loadStats() {
    const index = $("index").value;
    if (!index) return;
    replace($("stats"), el("p", { class: "muted", text: "Reading the index…" }));
    try {
      showStats(await getJson(`v1/indexes/${encodeURIComponent(index)}/stats`));
    } catch (error) {
      replace($("stats"), el("p", { class: "muted", text: "Statistics unavailable." }));
      failed(error);
    }
  }

  function showStats(stats) {
    $("stats-title").textContent = `· ${stats.index}`;
    const counts = el("div", { class: "tiles" }, Object.entries(stats.counts).map(([name, value]) =>
      el("div", { class: "tile" }, [el("div", { class: "tile-value", text: number(value) }),
        el("div", { class: "tile-name", text: name })])));
    const d = stats.degree;
    const c = stats.components;
    const facts = el("dl", { class: "facts" });
    const rows = [
      ["Degree", `mean ${d.mean}, median ${d.median}, max ${number(d.max)}; ${number(d.isolated)} without a relation`],
      ["Components", `${number(c.count)}; the largest holds ${(100 * c.largest_share).toFixed(1)}% of the entities`],
      ["Types", stats.entity_types.map((t) => `${t.type} ${number(t.entities)}`).join(", ")],
      ["Built", stats.manifest.created_at],
      ["Embedding", stats.manifest.embedding_model],
    ];
    for (const [name, value] of rows) if (value) facts.append(el("dt", { text: name }), el("dd", { text: String(value) }));
    const top = el("div", { class: "chips" }, stats.top_entities.map((e) => el("button", {
      type: "button", class: "chip", text: `${e.name} (${e.degree})`, title: "draw the graph around it",
      onclick: () => drawGraph(stats.index, [e.key]),
    })));
    replace($("stats"), counts, facts, el("h3", { text: "Most connected" }), top);
  }

  // ------------------------------------------------------------------------------------------ start

  document.addEventListener("DOMContentLoaded", () => {
    $("api-key").value = sessionStorage.getItem(KEY_STORAGE) || "";
    $("key-form").addEventListener("submit", saveKey);
    $("ask-form").addEventListener("submit", ask);
    $("question").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("ask-form").requestSubmit();
    });
    $("stop").addEventListener("click", () => asking && asking.abort());
    $("index").addEventListener("change", loadStats);
    $("reader-close").addEventListener("click", () => $("reader").close());
    connect();
  });
})();
