// forgetmap explorer: the page's behaviour. Every text from the data goes in with textContent.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("data").textContent);
  const taskIndex = new Map(data.tasks.map((t, i) => [t.name, i]));
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
              fmt(e.z), e.predicted === undefined ? "–" : fmt(e.predicted),
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
        (task.predicted_by ? "; predicted by " + task.predicted_by : "") }),
      el("h2", { text: "Most forgotten" }), table(HEADERS, exampleRows(top.forgotten), "task-forgotten"),
      el("h2", { text: "Most improved" }), table(HEADERS, exampleRows(top.improved), "task-improved"));
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

  drawOverview();
  showComponents();
  wireSearch();
  if (data.tasks.length) showTask(data.tasks[0].name);
  if (!data.texts) {
    document.getElementById("status").textContent = "an imported matrix: its examples are shown by id and source (no texts were released)";
  }
  document.body.dataset.ready = "1";
})();
