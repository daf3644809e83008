// forgetmap explorer: the page's behaviour. Every text from the data goes in with textContent.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const taskIndex = new Map((data.tasks || []).map((t, i) => [t.name, i]));
  const fmt = (v, digits = 3) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));

  function el(tag, attrs = {}, children = []) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "text") node.textContent = value;
      else if (key === "onclick") node.addEventListener("click", value);
      else node.setAttribute(key, value);
    }
    for (const child of children) node.appendChild(child);
    return node;
  }

  function link(text, onclick, id) {
    const a = el("a", { class: "link", text: text, onclick: onclick });
    if (id) a.dataset.id = id;
    return a;
  }

  function table(headers, rows, id) {
    const head = el("tr", {}, headers.map((h) => el("th", { text: h })));
    const body = rows.map((cells) => el("tr", {}, cells.map((c) => {
      if (c instanceof Node) return el("td", {}, [c]);
      const numeric = typeof c === "number" || (typeof c === "string" && /^-?[0-9.]+$/.test(c));
      return el("td", { class: numeric ? "num" : "text", text: c === null || c === undefined ? "–" : String(c) });
    })));
    return el("table", id ? { id: id } : {}, [el("thead", {}, [head]), el("tbody", {}, body)]);
  }

  // an example's text: a plain-text (lm) example's text, a chat example's prompt → response
  function exampleText(ex) {
    if (ex.text !== undefined) return ex.text;
    return (ex.prompt ? ex.prompt + "\n→ " : "") + (ex.response || "");
  }

  const SHORT = 300;  // characters of a text shown in a table or before "show all"
  const shorten = (text) => (text.length > SHORT ? text.slice(0, SHORT) + "…" : text);

  // the example card's text: shortened when long, with a link that shows all the page carries of it
  function textBlock(ex) {
    const whole = exampleText(ex);
    const pre = el("pre", { id: "example-text", text: shorten(whole) });
    const note = ex.length === undefined ? "" :
      " (the page carries part of its " + ex.length + " characters; all of it is in the upstream shards)";
    if (whole.length <= SHORT) return [pre];
    const toggle = link("show all" + note, () => {
      const full = pre.dataset.full === "1";
      pre.textContent = full ? shorten(whole) : whole;
      pre.dataset.full = full ? "0" : "1";
      toggle.textContent = full ? "show all" + note : "show less";
    });
    toggle.id = "example-more";
    return [pre, toggle];
  }

  function kindBadge(task) {
    const kind = data.tasks[taskIndex.get(task)].kind;
    return el("span", { class: "kind " + kind, text: kind });
  }

  function exampleRows(entries) {
    return entries.map((e) => {
      const ex = data.examples[e.id] || {};
      return [link(e.id, () => showExample(e.id), e.id), ex.source || "", shorten(exampleText(ex)), fmt(e.base_nll), fmt(e.after_nll),
              fmt(e.z) + (e.completed === undefined ? "" : " (completed ± " + fmt(e.completed) + ")"),
              e.predicted === undefined ? "–" : fmt(e.predicted),
              e.halfwidth === undefined || e.halfwidth === null ? "–" : "± " + fmt(e.halfwidth),
              e.transition || "–"];
    });
  }

  const HEADERS = ["example", "source", "text (prompt → response)", "NLL before", "NLL after", "Z", "predicted",
                   "interval", "item"];

  function showTask(name) {
    const i = taskIndex.get(name);
    if (i === undefined) return false;
    const task = data.tasks[i];
    const top = data.task_top[name];
    const title = document.getElementById("task-title");
    title.textContent = (task.checkpoint ? "Checkpoint " : "Task ") + name + " ";
    title.appendChild(kindBadge(name));
    const body = document.getElementById("task-body");
    body.replaceChildren(
      el("p", { class: "note", text: (task.checkpoint ? task.checkpoint.path + ", compared with " +
        task.checkpoint.reference + "; post-training type " : "category ") + task.category + "; mean Z " + fmt(task.mean) +
        "; share forgotten " + fmt(task.forgotten, 2) +
        (task.measured_share === undefined ? "" : "; " + fmt(100 * task.measured_share, 0) + " % of its cells measured, " +
          "the rest completed from the map (each ± " + fmt(task.completed_halfwidth) + " at level " + task.level + ")") +
        (task.predicted_by ? "; predicted by " + task.predicted_by : "") }),
      el("h2", { text: "Most forgotten" }), table(HEADERS, exampleRows(top.forgotten), "task-forgotten"),
      el("h2", { text: "Most improved" }), table(HEADERS, exampleRows(top.improved), "task-improved"));
    const timeline = (data.timelines || {})[name];
    if (timeline) drawTaskTimeline(body, timeline);
    const protectedBy = data.protected[name];
    if (protectedBy) {
      body.appendChild(el("h2", { text: "Held-out examples each arm protected (ΔNLL plain − ΔNLL arm)" }));
      for (const [arm, entries] of Object.entries(protectedBy)) {
        body.appendChild(el("p", { text: arm }));
        body.appendChild(table(["example", "source", "protected by"], entries.map(([id, gain]) =>
          [link(id, () => showExample(id), id), (data.examples[id] || {}).source || "", fmt(gain)])));
      }
    }
    document.getElementById("status").textContent = "task " + name;
    return true;
  }

  // a monitored fine-tune's checks: the mean (the estimate its upper bound bounds), the forecast's own mean, the
  // probes' mean, the measured mean
  function drawTaskTimeline(body, t) {
    const box = el("div", { id: "task-timeline" });
    body.appendChild(el("div", {}, [el("h2", { text: "Forecast while training (" + t.steps.length + " checks)" }), box,
      table(["step", "share of steps", "mean", t.level ? "upper (" + t.level + ")" : "upper", "forecast mean",
             "probes' mean"],
        t.steps.map((step, c) => [step, fmt(t.fraction[c], 2), fmt(t.mean[c]), t.upper ? fmt(t.upper[c]) : "–",
                                  fmt(t.forecast_mean[c]), fmt(t.probe_mean[c])]), "task-checks")]));
    const traces = [{ x: t.fraction, y: t.mean, name: "mean (estimate)", mode: "lines+markers" }];
    traces.push({ x: t.fraction, y: t.forecast_mean, name: "forecast mean", mode: "lines", line: { dash: "dash" } });
    if (t.upper) traces.push({ x: t.fraction, y: t.upper, name: "upper bound", mode: "lines", line: { dash: "dot" } });
    traces.push({ x: t.fraction, y: t.probe_mean, name: "probes' mean (naive)", mode: "lines+markers" });
    if (t.measured != null) traces.push({ x: [0, 1], y: [t.measured, t.measured], name: "measured final mean",
                                           mode: "lines", line: { dash: "dash", color: "black" } });
    Plotly.newPlot(box, traces, { height: 260, margin: { l: 50, r: 10, t: 10, b: 40 },
      xaxis: { title: { text: "share of training steps" } }, yaxis: { title: { text: "Z (nats per token)" } } },
      { responsive: true, displaylogo: false });
  }

  function showExample(id) {
    const ex = data.examples[id];
    if (!ex) return false;
    document.getElementById("example-title").textContent = "Example " + id + " (" + ex.source + ")";
    const byTask = data.tasks.map((t, i) => [t.name, ex.z[i], ex.transitions && data.transition_tasks.indexOf(t.name) >= 0
      ? ex.transitions[data.transition_tasks.indexOf(t.name)] : null]).filter((r) => r[1] !== null);
    byTask.sort((a, b) => b[1] - a[1]);
    const body = document.getElementById("example-body");
    body.replaceChildren(
      ...textBlock(ex),
      el("p", { class: "note", text: "kind " + ex.kind + "; NLL before " + fmt(ex.base_nll) +
        "; component loadings " + ex.loadings.map((v, c) => "#" + (c + 1) + " " + fmt(v, 2)).join(", ") }),
      el("h2", { text: "Tasks that forget it most" }),
      table(["task", "category", "Z", "item"], byTask.map(([task, z, transition]) =>
        [link(task, () => showTask(task), task), data.tasks[taskIndex.get(task)].category, fmt(z), transition || "–"]),
        "example-tasks"));
    document.getElementById("status").textContent = "example " + id;
    return true;
  }

  function showComponents() {
    const body = document.getElementById("components-body");
    for (const comp of data.components) {
      body.appendChild(el("h2", { text: "Component " + comp.index + " (" + fmt(100 * comp.share, 1) + " % of the variance)" }));
      const tasks = el("p", {}, []);
      comp.tasks.forEach(([task, loading], k) => {
        if (k) tasks.appendChild(document.createTextNode(", "));
        tasks.appendChild(link(task, () => showTask(task), task));
        tasks.appendChild(document.createTextNode(" " + fmt(loading, 2)));
      });
      body.appendChild(tasks);
      body.appendChild(table(["example", "source", "text (prompt → response)", "loading"], comp.examples.map(([id, loading]) => {
        const ex = data.examples[id] || {};
        return [link(id, () => showExample(id), id), ex.source || "", shorten(exampleText(ex)), fmt(loading, 2)];
      })));
    }
  }

  function drawOverview() {
    const names = data.overview.tasks;
    const labels = names.map((t) => {
      const task = data.tasks[taskIndex.get(t)];
      return (task.kind === "forecast" || task.kind === "check" ? "◆ " : "") + t + " (" + task.category + ")";
    });
    const order = names.map((_, i) => i).sort((a, b) => {
      const ca = data.tasks[taskIndex.get(names[a])].category, cb = data.tasks[taskIndex.get(names[b])].category;
      return ca < cb ? -1 : ca > cb ? 1 : a - b;
    });
    const z = order.map((i) => data.overview.values[i]);
    const finite = z.flat().filter((v) => v !== null).map(Math.abs).sort((a, b) => a - b);
    const limit = finite.length ? finite[Math.floor(0.98 * (finite.length - 1))] || 1 : 1;
    Plotly.newPlot("heatmap", [{
      type: "heatmap", z: z, x: data.overview.columns, y: order.map((i) => labels[i]), customdata: order.map((i) =>
        data.overview.columns.map(() => names[i])), colorscale: "RdBu", zmin: -limit, zmax: limit,
      hovertemplate: "%{y}<br>%{x}<br>mean Z %{z:.3f}<extra></extra>", colorbar: { title: { text: "Z" } },
    }], {
      margin: { l: 220, r: 20, t: 10, b: 40 }, height: Math.max(260, 18 * names.length + 80),
      // one label per source, at the middle bin of its span of columns
      xaxis: { tickmode: "array", tickangle: -30, tickvals: data.overview.sources.map(([, first, last]) =>
        data.overview.columns[Math.floor((first + last) / 2)]), ticktext: data.overview.sources.map(([name]) => name),
        title: { text: "upstream examples: " + data.n_examples + ", by source" } },
      yaxis: { automargin: true, autorange: "reversed" },
    }, { responsive: true, displaylogo: false });
    document.getElementById("heatmap").on("plotly_click", (event) => showTask(event.points[0].customdata));
  }

  function wireSearch() {
    const names = document.getElementById("names");
    for (const t of data.tasks) names.appendChild(el("option", { value: t.name }));
    for (const id of Object.keys(data.examples)) names.appendChild(el("option", { value: id }));
    const search = document.getElementById("search");
    search.addEventListener("keydown", (event) => {
      if (event.key !== "Enter") return;
      const query = search.value.trim();
      if (!showTask(query) && !showExample(query)) {
        document.getElementById("status").textContent = "not found: " + query + " (examples carried: " + data.carried + ")";
      }
    });
  }

  // --- a trainer run's page: its forgetting monitor's checks as a timeline ------------------------------

  function runText(ex) {
    return ex.text !== undefined || ex.prompt !== undefined || ex.response !== undefined ? shorten(exampleText(ex)) :
      "(no text: give the upstream shards, --shards)";
  }

  function showRunExample(id) {
    const ex = data.examples[id];
    if (!ex) return false;
    const steps = data.timeline.steps;
    document.getElementById("example-title").textContent = "Example " + id + " (" + ex.source + ")" +
      (ex.probe ? ", a probe" : "");
    const body = document.getElementById("example-body");
    const hasText = ex.text !== undefined || ex.prompt !== undefined || ex.response !== undefined;
    body.replaceChildren(
      ...(hasText ? textBlock(ex) : [el("p", { class: "note", text: runText(ex) })]),
      el("p", { class: "note", text: (ex.probe ? "measured at every check (a probe); " : "forecast at every check; ") +
        "NLL before " + fmt(ex.base_nll) }),
      table(["step", ex.probe ? "forecast (the probe's row value)" : "forecast", "interval"], steps.map((step, c) =>
        [step, fmt(ex.forecast[c]), ex.halfwidth ? "± " + fmt(ex.halfwidth[c]) : "–"]), "example-checks"));
    document.getElementById("status").textContent = "example " + id;
    return true;
  }

  function drawRun() {
    const t = data.timeline;
    document.getElementById("overview-title").textContent = "The run's checks";
    document.getElementById("overview-note").textContent = "At each check: the mean forgetting over the " +
      "map's " + data.n_examples + " upstream examples and its interval" + (data.level ? " (at " + data.level +
      ")" : "") + ", from " + data.k + " probes scored on the weights being trained (the forecast, corrected by the " +
      "audit examples where the map has them); the forecast's own mean; the probes' mean NLL change (what a naive " +
      "monitor sees)" + (data.budget != null ? "; the budget" : "") + ".";
    document.getElementById("heatmap").replaceChildren();
    const traces = [{ x: t.steps, y: t.mean, name: "mean (estimate)", mode: "lines+markers" }];
    if (t.lower) traces.push({ x: t.steps, y: t.lower, name: "lower bound", mode: "lines", line: { dash: "dot" } });
    if (t.forecast_mean) traces.push({ x: t.steps, y: t.forecast_mean, name: "forecast mean", mode: "lines",
                                       line: { dash: "dash" } });
    if (t.upper) traces.push({ x: t.steps, y: t.upper, name: "upper bound", mode: "lines", line: { dash: "dot" } });
    traces.push({ x: t.steps, y: t.probe_mean, name: "probes' mean (naive)", mode: "lines+markers" });
    if (data.budget != null) traces.push({ x: [t.steps[0], t.steps[t.steps.length - 1]], y: [data.budget, data.budget],
                                           name: "budget", mode: "lines", line: { dash: "dash", color: "black" } });
    Plotly.newPlot("heatmap", traces, { height: 320, margin: { l: 60, r: 20, t: 10, b: 40 },
      xaxis: { title: { text: "optimizer step" } }, yaxis: { title: { text: "Z (nats per token)" } } },
      { responsive: true, displaylogo: false });
    document.getElementById("task-title").textContent = "Checks";
    const columns = [["mean", "mean"], ["lower", "lower bound"], ["upper", "upper bound"],
                     ["forecast_mean", "forecast mean"], ["probe_mean", "probes' mean"],
                     ["forecast_forgotten", "share forecast forgotten"], ["over_budget", "share over the budget"],
                     ["over_budget_upper", "its upper bound"], ["forecast_over_budget", "share forecast over it"],
                     ["replay_share", "replayed share"]].filter(([key]) => t[key]);
    document.getElementById("task-body").replaceChildren(
      el("p", { class: "note", text: data.path + "; map " + (data.map || "–") + " (" + (data.method || "–") + ")" }),
      table(["step", "epoch", ...columns.map(([, label]) => label)], t.steps.map((step, c) =>
        [step, fmt(t.epochs[c], 2), ...columns.map(([key]) => fmt(t[key][c]))]), "run-checks"));
    document.getElementById("components-title").textContent = "Forecast most forgotten at the last check";
    const last = t.steps.length - 1;
    const rows = data.top.map((id) => {
      const ex = data.examples[id];
      return [link(id, () => showRunExample(id), id), ex.source, runText(ex), fmt(ex.forecast[last]),
              ex.halfwidth ? "± " + fmt(ex.halfwidth[last]) : "–", fmt(ex.forecast[last] - ex.forecast[0])];
    });
    const grid = el("div", { id: "run-heatmap" });
    document.getElementById("components-body").replaceChildren(
      table(["example", "source", "text (prompt → response)", "forecast", "interval", "since the first check"], rows,
            "run-top"), el("h2", { text: "Their forecast at each check" }), grid);
    Plotly.newPlot(grid, [{ type: "heatmap", z: data.top.map((id) => data.examples[id].forecast), x: t.steps.map(String),
      y: data.top, colorscale: "RdBu", reversescale: true, hovertemplate: "%{y}<br>step %{x}<br>forecast %{z:.3f}<extra></extra>" }],
      { height: Math.max(240, 16 * data.top.length + 80), margin: { l: 120, r: 20, t: 10, b: 40 },
        xaxis: { title: { text: "check (step)" }, type: "category" }, yaxis: { autorange: "reversed" } },
      { responsive: true, displaylogo: false });
    const names = document.getElementById("names");
    for (const id of Object.keys(data.examples)) names.appendChild(el("option", { value: id }));
    const search = document.getElementById("search");
    search.placeholder = "search an example id, then Enter";
    search.addEventListener("keydown", (event) => {
      if (event.key !== "Enter") return;
      if (!showRunExample(search.value.trim())) {
        document.getElementById("status").textContent = "not found: " + search.value.trim() + " (examples carried: " +
          data.carried + ")";
      }
    });
    if (data.top.length) showRunExample(data.top[0]);
  }

  if (data.mode === "run") {
    drawRun();
  } else {
    drawOverview();
    showComponents();
    wireSearch();
    if (data.tasks.length) showTask(data.tasks[0].name);
    if (!data.texts) {
      document.getElementById("status").textContent = "an imported matrix: its examples are shown by id and source (no texts were released)";
    }
  }
  document.body.dataset.ready = "1";
})();
