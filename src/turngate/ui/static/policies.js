// turngate observer: the Policies view. Which policies decided the recorded turns
// (GET /policy/history) and a what-if of an installed policy over them (POST /policy/whatif),
// listing every turn it would decide otherwise with a link to the turn. Both routes need the
// admin role; a key without it is told so. Rendering helpers come from app.js (`ui`).

function verdict(ui, v) {
  return ui.h("span", null, ui.decisionBadge(v.decision), " ", v.reason_codes.map((code) => ui.h("code", { class: "reason" }, code, " ")));
}

async function postJson(ui, path, body) {
  const response = await fetch(new URL(path, location.origin), {
    method: "POST",
    headers: { Accept: "application/json", "Content-Type": "application/json", ...ui.authHeaders() },
    body: JSON.stringify(body),
    cache: "no-store",
  });
  let payload = null;
  try {
    payload = await response.json();
  } catch {
    payload = null;
  }
  if (!response.ok) throw new ui.ApiError(response.status, payload);
  return payload;
}

function historyTable(ui, history) {
  const rows = history.versions.map((v) =>
    ui.h(
      "tr",
      { "data-policy": `${v.role}:${v.policy_id}:${v.policy_version}` },
      ui.h("th", { scope: "row" }, ui.h("code", null, v.policy_id)),
      ui.h("td", null, v.policy_version),
      ui.h("td", null, v.role),
      ui.h("td", null, ui.digestEl(v.config_digest)),
      ui.h("td", { class: "num" }, String(v.decisions)),
      ui.h(
        "td",
        null,
        Object.entries(v.reasons).map(([decision, codes]) =>
          ui.h("div", null, ui.decisionBadge(decision), " ", Object.entries(codes).map(([code, n]) => ui.h("code", { class: "reason" }, `${code} ×${n} `))),
        ),
      ),
      ui.h("td", null, `${ui.fmtTime(v.first_at)} – ${ui.fmtTime(v.last_at)}`),
    ),
  );
  return ui.table(
    `${history.versions.length} policy version(s) over ${history.decisions} DECISION(s)`,
    ["Policy", "Version", "Role", "Config digest", { label: "Turns", num: true }, "Decisions by reason", "First – last"],
    rows,
  );
}

function whatifResult(ui, report) {
  const flips = report.flipped.map((f) =>
    ui.h(
      "tr",
      { "data-flip": f.correlation_id },
      ui.h("th", { scope: "row" }, ui.h("a", { href: `#/turn/${ui.enc(f.correlation_id)}` }, f.correlation_id)),
      ui.h("td", null, ui.h("a", { href: `#/thread/${ui.enc(f.thread_id)}` }, f.thread_id)),
      ui.h("td", null, f.change),
      ui.h("td", null, verdict(ui, f.recorded)),
      ui.h("td", null, verdict(ui, f.candidate), f.error ? ui.h("p", { class: "hint" }, `${f.error.code}: ${f.error.detail}`) : null),
    ),
  );
  const summary = ui.h(
    "p",
    { id: "whatif-summary" },
    `${report.policy.policy_id} v${report.policy.policy_version}: ${report.checked} turn(s) checked, ${report.flipped.length} would change, ${report.errors.length} policy error(s).`,
    report.config_unknown ? ` ${report.config_unknown} turn(s) under another context config were not checked.` : "",
    report.unreproducible ? ` ${report.unreproducible} turn(s) whose recorded inputs do not recompute were not checked.` : "",
  );
  if (!report.flipped.length) return ui.h("div", null, summary);
  return ui.h("div", null, summary, ui.table("Turns the policy would decide otherwise", ["Turn", "Thread", "Change", "Recorded", "With this policy"], flips));
}

export async function policiesView(ui) {
  ui.setNav("policies");
  const history = ui.h("div", { "aria-live": "polite" }, ui.h("p", { class: "hint" }, "Loading the policy history…"));
  const result = ui.h("div", { id: "whatif-result", "aria-live": "polite" });
  const moduleInput = ui.h("input", { id: "whatif-module", name: "module", required: true, placeholder: "turngate.policies.max_user_messages", size: "40" });
  const threadInput = ui.h("input", { id: "whatif-thread", name: "thread_id", size: "20" });
  const form = ui.h(
    "form",
    { class: "filters", id: "whatif-form" },
    ui.h("label", { for: "whatif-module" }, "Policy module (installed on the server, on its allow-list)"),
    moduleInput,
    ui.h("label", { for: "whatif-thread" }, "Thread (optional)"),
    threadInput,
    ui.h("button", { type: "submit" }, "Run what-if"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    result.replaceChildren(ui.h("p", { class: "hint" }, "Deciding the recorded turns again…"));
    try {
      const body = { module: moduleInput.value.trim() };
      if (threadInput.value.trim()) body.thread_id = threadInput.value.trim();
      result.replaceChildren(whatifResult(ui, await postJson(ui, "/policy/whatif", body)));
    } catch (error) {
      result.replaceChildren(ui.errorBox(error));
    }
  });
  ui.show(
    ui.h(
      "div",
      null,
      ui.h("h1", null, "Policies"),
      ui.h("h2", null, "What decided the recorded turns"),
      history,
      ui.h("h2", null, "What-if"),
      ui.h("p", { class: "hint" }, "Decides every recorded turn again with an installed policy, on the inputs recorded then, and lists the turns it would decide otherwise. Nothing is recorded."),
      form,
      result,
    ),
    "Policies",
  );
  try {
    history.replaceChildren(historyTable(ui, await ui.api("/policy/history")));
  } catch (error) {
    if (error.status !== 401) history.replaceChildren(ui.errorBox(error));
  }
}
