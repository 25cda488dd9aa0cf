// turngate observer: the Reviews view. The turns of your tenant that a policy sent to human
// review (GET /reviews), each with its message, what the policy asked (reason codes, role,
// deadline, four-eyes), the model and refs it would run with and its context manifest, and
// Approve / Deny with an optional comment (POST /reviews/{turn}/approve|deny). Deciding needs
// a key with the review role (docs/REVIEWS.md). Rendering helpers come from app.js (`ui`).

async function postVerdict(ui, correlationId, verdict, comment) {
  const response = await fetch(new URL(`/reviews/${ui.enc(correlationId)}/${verdict}`, location.origin), {
    method: "POST",
    headers: { Accept: "application/json", "Content-Type": "application/json", ...ui.authHeaders() },
    body: JSON.stringify(comment ? { comment } : {}),
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

function age(seconds) {
  if (typeof seconds !== "number") return "–";
  if (seconds < 120) return `${seconds} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function reviewCard(ui, review, reload) {
  const request = review.request;
  const commentId = `comment-${review.correlation_id}`;
  const comment = ui.h("textarea", { id: commentId, rows: "2", cols: "60", maxlength: "4000", placeholder: "Why you approve or deny (kept as an artifact; its digest is in the DECISION)" });
  const outcome = ui.h("div", { "aria-live": "polite" });
  const decide = (verdict) => async () => {
    outcome.replaceChildren(ui.h("p", { class: "hint" }, verdict === "approve" ? "Approving…" : "Denying…"));
    try {
      await postVerdict(ui, review.correlation_id, verdict, comment.value.trim());
      outcome.replaceChildren(ui.h("p", { role: "status" }, `${verdict === "approve" ? "Approved" : "Denied"}: the turn's DECISION is recorded next.`));
      setTimeout(reload, 800);
    } catch (error) {
      outcome.replaceChildren(ui.errorBox(error));
    }
  };
  const approve = ui.h("button", { type: "button", "data-verdict": "approve" }, "Approve");
  const deny = ui.h("button", { type: "button", class: "secondary", "data-verdict": "deny" }, "Deny");
  approve.addEventListener("click", decide("approve"));
  deny.addEventListener("click", decide("deny"));
  const manifest = ui.h("details", null, ui.h("summary", null, "Context manifest"), ui.h("pre", { class: "json" }, JSON.stringify(review.manifest, null, 2)));
  return ui.h(
    "section",
    { class: "review", "data-review": review.correlation_id, "aria-labelledby": `review-${review.correlation_id}` },
    ui.h("h2", { id: `review-${review.correlation_id}` }, ui.h("a", { href: `#/thread/${ui.enc(review.thread_id)}` }, review.correlation_id), " ", ui.decisionBadge("REVIEW")),
    ui.h("blockquote", { class: "message" }, review.message ?? "(the message is stored as an artifact)"),
    ui.dl([
      ["Asked by the policy", ui.h("span", null, request.reason_codes.map((code) => ui.h("code", { class: "reason" }, code, " ")))],
      ["Who may decide", `role ${request.role}${request.four_eyes ? ", four-eyes (not the intent's own caller)" : ""}`],
      ["Waiting", `${age(review.age_s)} (deadline ${new Date(review.deadline_at).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z")})`],
      ["Actor", review.actor],
      ["Model", `${review.provider ?? "–"} / ${review.model ?? "–"}`],
      ["Resolved refs", String(review.resolved_refs.length)],
      ["Context digest", ui.digestEl(review.context_digest)],
    ]),
    manifest,
    ui.h("div", { class: "review-actions" }, ui.h("label", { for: commentId }, "Comment (optional)"), comment, ui.h("div", null, approve, " ", deny)),
    outcome,
  );
}

export async function reviewsView(ui) {
  ui.setNav("reviews");
  const list = ui.h("div", { id: "reviews-list", "aria-live": "polite" }, ui.h("p", { class: "hint" }, "Loading the turns waiting for review…"));
  ui.show(
    ui.h(
      "div",
      null,
      ui.h("h1", null, "Reviews"),
      ui.h("p", { class: "hint" }, "Turns a policy sent to human review, oldest first. Approving records an ALLOW and the turn goes on to its model; denying records a DENY. Both are in the ledger with your key, the verdict and your comment's digest."),
      list,
    ),
    "Reviews",
  );
  const load = async () => {
    try {
      const { reviews } = await ui.api("/reviews");
      if (!reviews.length) {
        list.replaceChildren(ui.h("div", { class: "empty", id: "reviews-empty" }, ui.h("p", null, "No turn is waiting for review.")));
        return;
      }
      list.replaceChildren(ui.h("p", { id: "reviews-count" }, `${reviews.length} turn(s) waiting for review`), ...reviews.map((review) => reviewCard(ui, review, load)));
    } catch (error) {
      if (error.status !== 401) list.replaceChildren(ui.errorBox(error));
    }
  };
  await load();
}
