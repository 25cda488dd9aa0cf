"""Print the system prompt turngate would send for the Trickster example, with its layer records.

Runs offline, without Temporal or the API:

    .venv/bin/python examples/trickster/show_prompt.py [inputs.json] [--provider openai]
        [--exchanges N] [--redaction-reason safety.blocklist]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from turngate.core.prompt_layers import task_id_from_inputs
from turngate.core.system_prompt import build_system_prompt
from turngate.core.tools import offered_tools
from turngate.prompts.loader import load_prompt_config, load_snapshot
from turngate.prompts.pack_builders import pack_builders

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("inputs", nargs="?", default=str(HERE / "intent-inputs.json"))
    parser.add_argument("--pack", default=str(HERE / "prompts"))
    parser.add_argument("--provider", default="openai")
    parser.add_argument("--intent-type", default="chat.message")
    parser.add_argument("--exchanges", type=int, default=0, help="completed exchanges in the context")
    parser.add_argument("--redaction-reason")
    args = parser.parse_args()

    inputs = json.loads(Path(args.inputs).read_text(encoding="utf-8"))
    config = load_prompt_config(Path(args.pack))
    profile = config.profile_for(args.intent_type, inputs)
    snapshot = load_snapshot(
        Path(args.pack), task_id=task_id_from_inputs(inputs), provider=args.provider, config=config
    )
    prompt = build_system_prompt(
        snapshot, profile, inputs, builders=pack_builders(config), redaction_reason=args.redaction_reason
    )
    tools = offered_tools(config.tools_for(profile), args.exchanges)

    print(prompt.text)
    print("\n---")
    print(f"profile {prompt.profile}  trim_history={prompt.trim_history}  snapshot {prompt.snapshot_digest}")
    for layer in prompt.layers:
        where = layer.path or f"builder:{layer.builder}"
        print(f"  + {layer.name:<22} {layer.origin:<17} {layer.chars:>5} chars  {where}")
    for skipped in prompt.skipped:
        print(f"  - {skipped.name:<22} skipped: {skipped.reason}")
    print(f"tools offered at {args.exchanges} exchanges: {[spec.name for spec in tools]}")


if __name__ == "__main__":
    main()
