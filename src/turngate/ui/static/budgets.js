// turngate observer: budgets in effect with their spend this period (from GET /status, which
// lists a tenant's key its own tenant's budgets and an operator every tenant's; docs/BUDGETS.md).
// Rendering helpers come from app.js (`ui`).

function scope(budget) {
  return budget.key_id ? `${budget.tenant_id} / key ${budget.key_id}` : budget.tenant_id;
}

function money(micros) {
  return micros === null || micros === undefined ? "–" : (micros / 1e6).toString();
}

function limit(spent, max, render) {
  return max === null || max === undefined ? `${render(spent)} (no limit)` : `${render(spent)} of ${render(max)}`;
}

export function budgetsSection(ui, budgets) {
  if (!budgets || !budgets.length) {
    return ui.h("div", { class: "empty", id: "budgets-empty" }, ui.h("p", null, ui.h("strong", null, "No budgets: "), "none is set for this scope (turngate budgets set)."));
  }
  const rows = budgets.map((entry) => {
    const b = entry.budget;
    const spent = entry.spent;
    return ui.h(
      "tr",
      { "data-budget": String(b.budget_id) },
      ui.h("th", { scope: "row" }, scope(b)),
      ui.h("td", null, b.period),
      ui.h("td", null, `${ui.fmtTime(entry.window_start)} – ${ui.fmtTime(entry.window_end)}`),
      ui.h("td", null, limit(spent.tokens, b.max_tokens, String)),
      ui.h("td", null, limit(spent.cost_micros, b.max_cost_micros, money)),
      ui.h("td", null, `${entry.remaining.tokens ?? "–"} tokens, ${money(entry.remaining.cost_micros)} cost`),
      ui.h("td", null, `${entry.reserved.tokens} tokens, ${money(entry.reserved.cost_micros)} cost`),
    );
  });
  return ui.table(`${budgets.length} budget(s) in effect; spend = settled + reserved for turns in flight`, ["Scope", "Period", "Window", "Tokens spent", "Cost spent", "Left", "Reserved"], rows);
}
