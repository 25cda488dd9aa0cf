"""Every ``workflow.patched`` id the turn workflow asks, with what it guards and when it can go.

A patch id is recorded in the history of each turn that took the new branch (a marker plus the
``TemporalChangeVersion`` search attribute), and a turn recorded before it replays the old branch.
An id is retired in two steps once no workflow recorded before it can still run or be replayed
(turns last seconds; the bound is the namespace's history retention plus the recorded histories
under tests/replay): first ``workflow.deprecate_patch(id)`` and the old branch deleted, then, after
another retention period, the call itself. docs/WORKFLOW.md, "Workflow versions", lists the same.

tests/replay/test_patches.py checks that every id the workflow code asks is registered here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The context spec's schema version 2: declared external refs inside the digest scope.
CONTEXT_SPEC_V2 = "context-spec-v2"
#: The context spec's schema version 3: an ``event`` ref to a turn admits its EXECUTION beside
#: its INTENT.
CONTEXT_SPEC_V3 = "context-spec-v3-turn-refs"
#: Every executed turn records ``exchanges_count`` (before it, only turns with a system prompt
#: from a prompt pack did).
EXCHANGES_COUNT_ALWAYS = "exchanges-count-always"
#: The offered tool definitions count against the token budget.
TOOLS_IN_TOKEN_BUDGET = "tools-in-token-budget"
#: Tool calls and tool results are sent as tool messages (a tool loop).
TOOL_LOOP_MESSAGES = "tool-loop-messages"
#: Turns with an alias or a budget record a spend plan and may fall back.
GOVERNED_SPEND = "governed-spend"
#: The spend estimate counts everything sent, so the plan is made after assembly.
SPEND_COUNTS_REQUEST = "spend-counts-request"


@dataclass(frozen=True)
class Patch:
    """One patch id: since when turns take its branch, what the old branch is, and its retirement."""

    id: str
    since: str  # the date the branch was introduced (recorded histories before it take the old one)
    old_branch: str
    retire: str


REGISTER: tuple[Patch, ...] = (
    Patch(
        CONTEXT_SPEC_V2,
        "2026-11-25",
        "context spec v1 for turns with external refs (refs resolved outside the digest)",
        "deprecate once no v1 turn with external refs can replay; the recorded history "
        "allow_with_refs keeps v1 replayable until then",
    ),
    Patch(
        CONTEXT_SPEC_V3,
        "2026-11-27",
        "context spec v2 or v1 for turns with ledger refs (an event ref names one event)",
        "deprecate after one history retention period from 2026-11-27 (turn_refs history)",
    ),
    Patch(
        EXCHANGES_COUNT_ALWAYS,
        "2026-11-27",
        "exchanges_count only for turns with a prompt pack's system prompt",
        "deprecate after one history retention period from 2026-11-27 (turn_refs history); "
        "turns of shape 4 record it without asking",
    ),
    Patch(
        TOOLS_IN_TOKEN_BUDGET,
        "2026-11-25",
        "tool definitions sent but not counted against the token budget",
        "deprecate after one history retention period from 2026-11-25",
    ),
    Patch(
        TOOL_LOOP_MESSAGES,
        "2026-11-25",
        "tool calls and results flattened into plain messages",
        "deprecate after one history retention period from 2026-11-25 (tool_loop history)",
    ),
    Patch(
        GOVERNED_SPEND,
        "2026-11-25",
        "no spend plan, no fallback",
        "deprecate together with spend-counts-request (spend_alias history)",
    ),
    Patch(
        SPEND_COUNTS_REQUEST,
        "2026-11-27",
        "spend plan before assembly, estimated on the user message alone",
        "deprecate after one history retention period from 2026-11-27 (spend_request history)",
    ),
)

PATCH_IDS: frozenset[str] = frozenset(patch.id for patch in REGISTER)

# The turn's shape travels as data, not as a patch marker: ``Boundary.turn_shape``, which the
# worker sets and begin_turn returns (recorded in its marker). A history without it is shape 1.
#: Shape 1: DECISION append, provider call, EXECUTION append as three steps.
TURN_SHAPE_THREE_STEPS = 1
#: Shape 2: an allowed turn without a spend plan appends its DECISION, calls the provider and
#: appends its EXECUTION in one activity (``turngate.call_and_record``).
TURN_SHAPE_ONE_STEP = 2
#: Shape 3: shape 2 with the turn's search attributes (TurngateDecision, TurngatePolicyId) written
#: before the step, not after it: /status counts the running ALLOW turns as the LLM queue.
TURN_SHAPE_INDEXED_STEP = 3
#: Shape 4: shape 3, and every executed turn records ``exchanges_count`` without asking the
#: ``exchanges-count-always`` patch (no marker, no search-attribute write per turn).
TURN_SHAPE_COUNTED_STEP = 4
#: Shape 5: fault snapshots are stored by an activity of their own
#: (``turngate.store_fault_snapshots``: its own retries and wall-clock bound) before the event
#: that points at them is appended; the provider step hands back an EXECUTION with snapshots
#: unrecorded for it. Turns without a fault run exactly as in shape 4.
TURN_SHAPE_SNAPSHOT_STEP = 5
#: Shape 6: shape 5, and the loop guard (core/loop_guard.py) checks the request before the
#: provider step: a tool call repeated more than ``context.loop_guard_max_repeats`` times denies
#: the turn. Decided in workflow code: a turn recorded before it never takes the new branch.
TURN_SHAPE_LOOP_GUARD = 6
#: Shape 7: shape 6, and the turn's memo gains its outcome when it ends (decision, reason
#: codes, context digest, error code: ``workflows/ending_memo.py``), written in the workflow task
#: that completes the turn: one event more per turn, no extra workflow task.
TURN_SHAPE_ENDING_MEMO = 7
#: Shape 8: an answer that fails the client's JSON schema, or a tool call whose arguments fail
#: its tool's schema, is a fault of the EXECUTION (snapshots; ``ExecutionContext.output_faults``).
TURN_SHAPE_OUTPUT_FAULTS = 8
#: The shape a worker starts new turns in (worker/boundary.py).
CURRENT_TURN_SHAPE = TURN_SHAPE_OUTPUT_FAULTS
