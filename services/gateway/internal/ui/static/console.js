// The console's script: follows a running build's log and drives the
// invoke panel. Pages work without it. Everything from the server is put
// into the page as text (textContent), never as markup.
"use strict";

(function () {
  const maxLog = 256 * 1024;

  async function followLog(pre) {
    const url = pre.dataset.follow;
    const res = await fetch(url, { credentials: "same-origin" });
    if (!res.ok || !res.body) return;
    pre.textContent = "";
    pre.setAttribute("aria-busy", "true");
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (pre.textContent.length < maxLog) pre.append(dec.decode(value, { stream: true }));
    }
    pre.removeAttribute("aria-busy");
  }

  const maxTail = 500;

  // followLines appends the function's new log records (ndjson) to the
  // list as they are written, the oldest dropped past maxTail.
  async function followLines(list) {
    const res = await fetch(list.dataset.follow, { credentials: "same-origin" });
    if (!res.ok || !res.body) return;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let rest = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += dec.decode(value, { stream: true });
      const lines = rest.split("\n");
      rest = lines.pop();
      for (const line of lines) {
        if (!line.trim()) continue;
        let rec;
        try {
          rec = JSON.parse(line);
        } catch (e) {
          continue;
        }
        list.append(logItem(rec));
        while (list.children.length > maxTail) list.firstElementChild.remove();
      }
    }
  }

  function logItem(rec) {
    const li = el("li");
    if (rec.level) li.className = "lvl-" + String(rec.level).replace(/[^a-z]/g, "");
    li.append(el("span", "ts", rec.time ? new Date(rec.time).toISOString().replace("T", " ").slice(0, 19) : ""), " ",
      el("span", "stream", String(rec.stream || "")), " ");
    if (Number.isInteger(rec.function_version) && rec.function_version > 0) li.append(el("span", "ver", "v" + rec.function_version), " ");
    if (rec.invocation_id) {
      const a = el("a", "", String(rec.invocation_id).slice(0, 12));
      a.href = "/ui/invocations/" + encodeURIComponent(rec.invocation_id);
      li.append(a, " ");
    }
    li.append(el("span", "msg", String(rec.message || "")));
    return li;
  }

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function showResult(box, r) {
    box.textContent = "";
    const card = el("div", "card result");
    if (r.error) {
      const p = el("p", "error", r.error);
      p.setAttribute("role", "alert");
      card.append(p);
      box.append(card);
      return;
    }
    const line = el("p");
    line.append("Status ", el("strong", "inv-status", String(r.status)));
    if (r.invocation_id) {
      const a = el("a", "inv-id", r.invocation_id);
      a.href = "/ui/invocations/" + encodeURIComponent(r.invocation_id);
      line.append(" · invocation ", a);
    }
    card.append(line);
    const det = el("details");
    det.append(el("summary", "", "Response headers"));
    det.append(el("pre", "inv-headers", (r.headers || []).map((h) => h.name + ": " + h.value).join("\n")));
    card.append(det);
    card.append(el("pre", "inv-body", r.body));
    if (r.truncated) card.append(el("p", "help", "The body is cut at 64 KiB."));
    const p = el("p");
    const label = el("label", "", "As curl");
    label.htmlFor = "inv-curl";
    const ta = el("textarea", "inv-curl");
    ta.id = "inv-curl";
    ta.rows = 2;
    ta.readOnly = true;
    ta.value = r.curl;
    const copy = el("button", "", "Copy");
    copy.type = "button";
    copy.addEventListener("click", () => {
      ta.select();
      if (navigator.clipboard) navigator.clipboard.writeText(ta.value).catch(() => {});
    });
    p.append(label, ta, copy);
    card.append(p);
    box.append(card);
  }

  function invokePanel(form) {
    const box = document.getElementById("invoke-result");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const button = form.querySelector("button[type=submit]");
      button.disabled = true;
      box.setAttribute("aria-busy", "true");
      try {
        const res = await fetch(form.action, {
          method: "POST",
          credentials: "same-origin",
          headers: { Accept: "application/json" },
          body: new URLSearchParams(new FormData(form)),
        });
        if (res.status === 401) {
          window.location.assign("/ui/login");
          return;
        }
        showResult(box, await res.json());
      } catch (e) {
        showResult(box, { error: "The request failed: " + e });
      } finally {
        button.disabled = false;
        box.removeAttribute("aria-busy");
      }
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const pre = document.getElementById("build-log");
    if (pre && pre.dataset.follow) followLog(pre).catch(() => {});
    const tail = document.getElementById("log-tail");
    if (tail && tail.dataset.follow) followLines(tail).catch(() => {});
    const form = document.getElementById("invoke-form");
    if (form) invokePanel(form);
  });
})();
