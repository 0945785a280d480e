// berth dashboard: progressive enhancement only. Every page works without this file;
// with it: copy buttons, confirmation dialogs, live regions that refresh in place,
// and a deploy form that keeps what you typed when the server finds errors.
"use strict";

(function () {
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  function announce(text) {
    const region = $("#announcer");
    if (region && text) {
      region.textContent = "";
      window.setTimeout(() => { region.textContent = text; }, 50);
    }
  }

  // Buttons that only work with JavaScript start hidden; show them.
  function reveal(root) {
    $$("[data-copy], [data-add-row], [data-remove-row]", root).forEach((el) => { el.hidden = false; });
  }

  // --- copy -------------------------------------------------------------------------

  async function copy(button) {
    const target = $(button.dataset.copy);
    if (!target) return;
    const text = "value" in target ? target.value : target.textContent;
    let done = false;
    try {
      await navigator.clipboard.writeText(text);
      done = true;
    } catch (_) {
      if (typeof target.select === "function") {
        target.focus();
        target.select();
        try { done = document.execCommand("copy"); } catch (_) { done = false; }
      }
    }
    const label = button.dataset.label || button.textContent;
    button.dataset.label = label;
    button.textContent = done ? "Copied" : "Press Ctrl+C";
    announce(done ? "Copied to the clipboard." : "Selected: press Control C to copy.");
    window.setTimeout(() => { button.textContent = label; }, 2000);
  }

  // --- confirmation dialogs ---------------------------------------------------------

  function confirmThenSubmit(form) {
    const dialog = document.createElement("dialog");
    dialog.className = "confirm";
    const text = document.createElement("p");
    text.id = "confirm-text";
    text.textContent = form.dataset.confirm;
    dialog.setAttribute("aria-describedby", text.id);
    dialog.setAttribute("aria-label", form.dataset.confirmButton || "Confirm");
    const actions = document.createElement("div");
    actions.className = "form-actions";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "button";
    cancel.textContent = "Cancel";
    const ok = document.createElement("button");
    ok.type = "button";
    ok.className = "button danger";
    ok.textContent = form.dataset.confirmButton || "Confirm";
    actions.append(cancel, ok);
    dialog.append(text, actions);
    document.body.append(dialog);
    dialog.addEventListener("close", () => dialog.remove());
    cancel.addEventListener("click", () => dialog.close());
    ok.addEventListener("click", () => {
      // A live refresh may have replaced the form while the dialog was open: a form no
      // longer in the page submits nothing, so send its twin (same action) instead.
      const action = form.getAttribute("action");
      const target = form.isConnected ? form
        : $$("form").find((f) => f.getAttribute("action") === action) || form;
      const field = target.querySelector('input[name="confirm"]');
      if (field) field.value = "yes";
      dialog.close();
      target.submit();
    });
    dialog.showModal();
    cancel.focus();
  }

  // --- live regions -----------------------------------------------------------------

  // Where each log that follows its end (`data-stick`, e.g. a build's log) was scrolled:
  // -1 at its end, where it stays as lines arrive; else where the reader left it.
  const scrolled = (root) => new Map($$("[data-stick][id]", root).map((el) => [
    el.id, el.scrollTop + el.clientHeight >= el.scrollHeight - 8 ? -1 : el.scrollTop,
  ]));

  function restoreScroll(root, before) {
    $$("[data-stick][id]", root).forEach((el) => {
      const was = before.has(el.id) ? before.get(el.id) : -1;
      el.scrollTop = was === -1 ? el.scrollHeight : was;
    });
  }

  function swap(region, html) {
    const open = new Map($$("details[id]", region).map((d) => [d.id, d.open]));
    const stuck = scrolled(region);
    const focused = region.contains(document.activeElement) ? document.activeElement.id : "";
    const logs = $(".logs", region);
    const stick = !logs || logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 8;
    const before = $("[data-announce]", region);
    const previous = before ? before.dataset.announce : "";
    region.innerHTML = html;
    $$("details[id]", region).forEach((d) => { if (open.has(d.id)) d.open = open.get(d.id); });
    restoreScroll(region, stuck);
    if (focused) {
      const again = document.getElementById(focused);
      if (again) again.focus({ preventScroll: true });
    }
    const newLogs = $(".logs", region);
    if (newLogs && stick && region.hasAttribute("data-stick-bottom")) newLogs.scrollTop = newLogs.scrollHeight;
    const after = $("[data-announce]", region);
    if (after && after.dataset.announce !== previous) announce(after.dataset.announce);
    reveal(region);
  }

  // A live region is refetched every `data-every` ms. While a deployment runs, its
  // root names the deployments' event streams (`data-follow`): the region is refetched
  // when a step arrives on one, not every second; if a stream cannot be held, the
  // region falls back to polling every second until the deployments finish.
  // A region that names its apps' status stream (`data-status-stream`) is refetched when
  // a `status` message differs from what it shows (its root's `data-status-key`), and
  // polled only every `data-calm` ms while that stream is held.
  function live(region) {
    const every = Number(region.dataset.every) || 3000;
    const calm = Number(region.dataset.calm) || every;
    const streams = new Map();
    let statuses = null;
    let timer = 0;
    let soon = 0;
    const root = () => $("[data-follow]", region) || $("[data-busy]", region);
    const followed = () => {
      const el = root();
      return el && el.dataset.follow ? el.dataset.follow.split(" ").filter(Boolean) : [];
    };
    const streaming = () => {
      const urls = followed();
      return urls.length > 0 && urls.every((u) => streams.has(u) && streams.get(u).readyState !== 2);
    };
    const listening = () => statuses !== null && statuses.readyState !== 2;
    const schedule = () => {
      const el = root();
      const busy = el && el.dataset.busy === "true";
      window.clearTimeout(timer);
      timer = window.setTimeout(tick, busy && !streaming() ? 1000 : listening() ? calm : every);
    };
    const refreshSoon = () => {
      window.clearTimeout(soon);
      soon = window.setTimeout(tick, 100);
    };
    const listen = () => {
      if (!region.dataset.statusStream || typeof window.EventSource !== "function") return;
      statuses = new EventSource(region.dataset.statusStream);
      statuses.addEventListener("status", (event) => {
        const shown = $("[data-status-key]", region);
        if (!shown || shown.dataset.statusKey !== event.data) refreshSoon();
      });
      statuses.addEventListener("error", () => { if (statuses.readyState === 2) schedule(); });
    };
    const follow = () => {
      if (typeof window.EventSource !== "function") return;
      const wanted = new Set(followed());
      for (const [url, source] of streams) {
        if (!wanted.has(url)) { source.close(); streams.delete(url); }
      }
      for (const url of wanted) {
        if (streams.has(url)) continue;
        const source = new EventSource(url);
        source.addEventListener("step", refreshSoon);
        source.addEventListener("end", () => { source.close(); refreshSoon(); });
        source.addEventListener("error", () => { if (source.readyState === 2) schedule(); });
        streams.set(url, source);
      }
    };
    const tick = async () => {
      if (document.hidden) return schedule();
      try {
        const response = await fetch(region.dataset.live, {
          credentials: "same-origin",
          cache: "no-store",
          headers: { Accept: "text/html" },
        });
        if (response.status === 401) { window.location.reload(); return; }
        if (response.ok) {
          const wasBusy = root() && root().dataset.busy === "true";
          swap(region, await response.text());
          follow();
          const busy = root() && root().dataset.busy === "true";
          // A deployment ended: what the apps use has just changed; measure it now.
          if (wasBusy && !busy) document.dispatchEvent(new CustomEvent("berth:settled"));
        }
      } catch (_) {
        // Offline for a moment: keep what is shown and try again.
      }
      schedule();
    };
    document.addEventListener("visibilitychange", () => { if (!document.hidden) tick(); });
    if (region.scrollHeight && region.hasAttribute("data-stick-bottom")) {
      const logs = $(".logs", region);
      if (logs) logs.scrollTop = logs.scrollHeight;
    }
    restoreScroll(region, new Map());
    follow();
    listen();
    if (region.hasAttribute("data-eager")) {
      document.addEventListener("berth:settled", refreshSoon);
      tick();
    } else schedule();
  }

  // --- an app's logs: follow, pause, timestamps, search -----------------------------

  // The section names its event stream (`data-log-stream`): each `line` message is a
  // line of the container's output, `end` says the container stopped; while following,
  // the stream is opened again after a growing pause (the container may be restarted).
  // A (re)opened stream starts with the last lines, which replace those shown.
  function logStream(section) {
    const pre = $("#log-lines", section);
    const follow = $("#log-follow", section);
    const stamps = $("#log-ts", section);
    const search = $("#log-q", section);
    const count = $("#log-count", section);
    $$("[data-log-js]", section).forEach((el) => { el.hidden = false; });
    const submit = $("[data-log-search-submit]", section);
    if (submit) submit.hidden = true;
    if (!pre || !follow) { if (follow) follow.hidden = true; if (stamps) stamps.closest("label").hidden = true; return; }
    const MAX = 5000;
    let source = null;
    let fresh = false;
    let wait = 2000;
    let timer = 0;
    let stamped = false;
    const matches = (el) => {
      const q = search ? search.value.trim().toLowerCase() : "";
      return !q || el.dataset.text.toLowerCase().includes(q);
    };
    const tally = () => {
      const lines = $$(".log-line", pre);
      const q = search ? search.value.trim() : "";
      const shown = lines.filter((el) => !el.hidden).length;
      if (count) count.textContent = q ? `Lines containing “${q}”: ${shown} of ${lines.length}.` : `${lines.length} line${lines.length === 1 ? "" : "s"}.`;
    };
    const filter = () => {
      $$(".log-line", pre).forEach((el) => { el.hidden = !matches(el); });
      tally();
    };
    $$(".log-line", pre).forEach((el) => {
      const ts = $(".ts", el);
      el.dataset.text = ts ? el.textContent.slice(ts.textContent.length + 1) : el.textContent;
    });
    const add = (data) => {
      if (fresh) { pre.textContent = ""; fresh = false; }
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
      const line = document.createElement("span");
      line.className = "log-line";
      line.dataset.text = data.text;
      if (data.at) {
        const time = document.createElement("time");
        time.className = "ts";
        time.dateTime = data.at;
        time.textContent = data.at.slice(11, 19);
        line.append(time, " ");
      }
      line.append(`${data.text}\n`);
      line.hidden = !matches(line);
      pre.append(line);
      while (pre.childElementCount > MAX) pre.firstElementChild.remove();
      if (stick) pre.scrollTop = pre.scrollHeight;
    };
    const setFollowing = (on) => {
      follow.setAttribute("aria-pressed", on ? "true" : "false");
      follow.textContent = on ? "Pause" : "Follow";
      section.dataset.following = on ? "true" : "false";
    };
    const close = () => {
      window.clearTimeout(timer);
      if (source) { source.close(); source = null; }
    };
    const open = () => {
      close();
      if (typeof window.EventSource !== "function") return;
      source = new EventSource(section.dataset.logStream);
      source.addEventListener("open", () => { fresh = true; });
      source.addEventListener("line", (event) => {
        wait = 2000;
        try { add(JSON.parse(event.data)); } catch (_) { /* a broken message: skip it */ }
        if (!stamped) { stamped = true; tally(); }
        window.clearTimeout(tally.timer);
        tally.timer = window.setTimeout(tally, 200);
      });
      const again = () => {
        if (source) { source.close(); source = null; }
        if (follow.getAttribute("aria-pressed") !== "true") return;
        timer = window.setTimeout(open, wait);
        wait = Math.min(wait * 2, 30000);
      };
      source.addEventListener("end", again);
      source.addEventListener("error", again);
    };
    follow.addEventListener("click", () => {
      const on = follow.getAttribute("aria-pressed") !== "true";
      setFollowing(on);
      announce(on ? "Following the app's output." : "Paused: new output is not shown.");
      if (on) open(); else close();
    });
    if (stamps) stamps.addEventListener("change", () => pre.classList.toggle("show-ts", stamps.checked));
    if (search) {
      search.addEventListener("input", filter);
      search.closest("form").addEventListener("submit", (event) => { event.preventDefault(); filter(); });
    }
    if (section.hasAttribute("data-follow-logs")) { setFollowing(true); open(); }
    pre.scrollTop = pre.scrollHeight;
  }

  // --- the deploy form's Source: the fields of the source chosen --------------------

  // Without JavaScript both sets of fields show and the radio says which is used; with
  // it, only the chosen one's.
  function sourceChoice(form) {
    const radios = $$("[data-source-choice]", form);
    if (!radios.length) return;
    const show = () => {
      const chosen = (radios.find((r) => r.checked) || radios[0]).value;
      $$("[data-source-part]", form).forEach((part) => {
        part.hidden = part.dataset.sourcePart !== chosen;
      });
    };
    radios.forEach((radio) => radio.addEventListener("change", show));
    show();
  }

  // --- environment rows -------------------------------------------------------------

  let rowCounter = 0;

  function addRow(button) {
    const fieldset = button.closest("fieldset");
    const template = $("#env-row-template");
    if (!fieldset || !template) return;
    rowCounter += 1;
    const row = template.content.firstElementChild.cloneNode(true);
    $$("[id]", row).forEach((el) => { el.id = el.id.replace("new", `added-${rowCounter}`); });
    $$("label[for]", row).forEach((el) => { el.htmlFor = el.htmlFor.replace("new", `added-${rowCounter}`); });
    $("[data-env-rows]", fieldset).append(row);
    reveal(row);
    $('input[name="env_key"]', row).focus();
  }

  function removeRow(button) {
    const row = button.closest("[data-env-row]");
    const rows = row && row.parentElement;
    if (!row || !rows) return;
    const next = row.nextElementSibling || row.previousElementSibling;
    row.remove();
    if (!rows.children.length) addRow($("[data-add-row]"));
    else if (next) $('input[name="env_key"]', next).focus();
  }

  // --- the deploy form: submit in place, keep what was typed ------------------------

  function setError(container, anchorId, text, kind) {
    let el = document.getElementById(anchorId);
    if (!text) {
      if (el) {
        if (kind === "row") el.remove(); else { el.hidden = true; el.textContent = ""; }
      }
      return;
    }
    if (!el) {
      el = document.createElement("p");
      el.className = "field-error env-error";
      el.id = anchorId;
      container.append(el);
    }
    el.textContent = text;
    el.hidden = false;
  }

  function applyErrors(form, fresh, doc) {
    const summary = $("[data-form-errors]");
    const freshSummary = $("[data-form-errors]", doc);
    if (summary && freshSummary) summary.innerHTML = freshSummary.innerHTML;
    $$("input[id], textarea[id]", form).forEach((el) => {
      const twin = fresh.querySelector(`#${CSS.escape(el.id)}`);
      if (!twin || el.name === "env_key" || el.name === "env_value") return;
      for (const attr of ["aria-invalid", "aria-describedby"]) {
        if (twin.hasAttribute(attr)) el.setAttribute(attr, twin.getAttribute(attr));
        else el.removeAttribute(attr);
      }
    });
    $$(".field-error:not(.env-error)", form).forEach((el) => {
      const twin = fresh.querySelector(`#${CSS.escape(el.id)}`);
      el.innerHTML = twin ? twin.innerHTML : "";  // the server's escaped text, <code> kept
      el.hidden = !twin || twin.hidden;
    });
    const rowErrors = new Map();
    $$(".env-error", fresh).forEach((el) => rowErrors.set(el.dataset.errorFor, el.textContent));
    $$("[data-env-row]", form).forEach((row, index) => {
      const key = $('input[name="env_key"]', row).value.trim();
      const value = $('textarea[name="env_value"]', row).value;
      const text = key || value ? rowErrors.get(`env.${key}`) : "";
      const id = `env-error-live-${index}`;
      $$(".env-error", row).forEach((el) => { if (el.id !== id) el.remove(); });
      setError(row, id, text || "", "row");
      const keyInput = $('input[name="env_key"]', row);
      if (text) { keyInput.setAttribute("aria-invalid", "true"); keyInput.setAttribute("aria-describedby", id); }
      else { keyInput.removeAttribute("aria-invalid"); keyInput.removeAttribute("aria-describedby"); }
      row.classList.toggle("has-error", Boolean(text));
    });
    const first = $('[aria-invalid="true"]', form) || $('[role="alert"]');
    if (first) {
      if (!first.matches("input, textarea")) first.setAttribute("tabindex", "-1");
      first.focus();
    }
    announce("The app was not deployed: some fields need attention.");
  }

  async function submitInPlace(form) {
    const button = $('[type="submit"]', form);
    if (button) { button.disabled = true; button.setAttribute("aria-busy", "true"); }
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new URLSearchParams(new FormData(form)),
        credentials: "same-origin",
        headers: { Accept: "text/html", "X-Berth-Fetch": "1" },
      });
      const next = response.headers.get("X-Berth-Location");
      if (next || response.redirected) {
        const url = new URL(next || response.url, window.location.href);
        const deployment = url.searchParams.get("deployment");
        if (deployment && !url.hash) url.hash = `deployment-${deployment}`;
        window.location.assign(url.toString());
        return;
      }
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = doc.getElementById(form.id);
      if (fresh) {
        applyErrors(form, fresh, doc);
      } else {
        const main = $("main");
        const other = $("main", doc);
        if (main && other) main.innerHTML = other.innerHTML;
        document.title = doc.title;
        if (main) main.focus();
      }
    } catch (_) {
      form.removeAttribute("data-enhance");
      form.submit();
    } finally {
      if (button) { button.disabled = false; button.removeAttribute("aria-busy"); }
    }
  }

  // --- wiring -----------------------------------------------------------------------

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (!target) return;
    const copyButton = target.closest("[data-copy]");
    if (copyButton) { copy(copyButton); return; }
    const add = target.closest("[data-add-row]");
    if (add) { addRow(add); return; }
    const remove = target.closest("[data-remove-row]");
    if (remove) removeRow(remove);
  });

  // An env row's Remove button names the variable it removes, as its name is typed.
  document.addEventListener("input", (event) => {
    const target = event.target;
    if (!(target instanceof HTMLInputElement) || target.name !== "env_key") return;
    const row = target.closest("[data-env-row]");
    const button = row && $("[data-remove-row]", row);
    const key = target.value.trim();
    if (button) button.setAttribute("aria-label", key ? `Remove variable ${key}` : "Remove this variable");
  });

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    if (form.dataset.confirm) {
      const field = form.querySelector('input[name="confirm"]');
      if (!field || field.value !== "yes") {
        event.preventDefault();
        confirmThenSubmit(form);
      }
      return;
    }
    if (form.hasAttribute("data-enhance")) {
      event.preventDefault();
      submitInPlace(form);
    }
  });

  function start() {
    reveal(document);
    // A page that answers a form's POST (a new token, a new server's install command)
    // names the address it stands for: reloading it, or going back to it, asks for that
    // page instead of sending the form again.
    const main = $("main[data-replace-url]");
    if (main && window.history && window.history.replaceState) {
      window.history.replaceState(null, "", main.dataset.replaceUrl);
    }
    $$("[data-live]").forEach(live);
    $$("form[data-enhance]").forEach(sourceChoice);
    $$("[data-log-stream]").forEach(logStream);
    const hash = window.location.hash.slice(1);
    const target = hash && document.getElementById(hash);
    if (target && target.tagName === "DETAILS") {
      target.open = true;
      // Arriving at a deployment (after deploying): focus is on it, not on the body --
      // once the browser has scrolled to the fragment, which would move focus again.
      const focusIt = () => {
        const summary = $("summary", document.getElementById(hash) || target);
        if (summary) summary.focus({ preventScroll: true });
      };
      if (document.readyState === "complete") window.setTimeout(focusIt, 0);
      else window.addEventListener("load", () => window.setTimeout(focusIt, 0), { once: true });
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
