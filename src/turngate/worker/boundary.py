"""The worker's boundary: what it decides with, loaded once at start (the context system: no hot reload)."""

from __future__ import annotations

from turngate.artifacts.configs import store_context_config, store_policy_config
from turngate.artifacts.store import ArtifactStore
from turngate.core.context import ContextConfig, context_config_digest
from turngate.core.policy import load_policy
from turngate.prompts.loader import load_prompt_config
from turngate.prompts.token_estimators import resolve_estimator
from turngate.providers.registry import provider_catalog
from turngate.settings import Settings
from turngate.spend.models_file import load_models_file
from turngate.workflows.patches import CURRENT_TURN_SHAPE
from turngate.workflows.shared import Boundary


def load_boundary(settings: Settings) -> Boundary:
    """Load and validate config, policy and provider catalog; fail loudly before serving."""
    config = settings.context_config()
    load_policy(settings.policy_module, settings.policy_object)  # import errors surface now
    for name in settings.shadow_policies:
        load_policy(name)
    models = load_models_file(settings.models_file)  # SpendError names the file
    prompts = load_prompt_config(settings.prompts_dir) if settings.prompts_dir else None
    return Boundary(
        policy_module=settings.policy_module,
        policy_object=settings.policy_object,
        context_config=config,
        context_config_digest=context_config_digest(config),
        provider_catalog=provider_catalog(settings),
        llm_task_queue=settings.llm_task_queue,
        llm_wall_clock_s=settings.llm_wall_clock_s,
        provider_activity=settings.provider_activity,
        budget_tokens=settings.token_budget,
        token_estimator=resolve_estimator(settings.token_estimator).name,
        prompt_config=prompts,
        artifact_deadline_s=settings.artifact_deadline_s,
        shadow_policies=settings.shadow_policies,
        models=models,
        turn_shape=CURRENT_TURN_SHAPE,
        snapshot_sample_n=settings.snapshot_sample_n,
        review_webhook=bool(settings.review_webhook_url),
    )


def store_boundary_configs(artifacts: ArtifactStore, boundary: Boundary) -> None:
    """Store the configs this worker decides with under the digests its DECISIONs will record
    (the context config, the active and shadow policies' configs), before it takes a turn:
    ``turngate verify`` loads them to recompute a DECISION after the config has changed
    (docs/AUDIT.md)."""
    cfg = ContextConfig.model_validate(boundary.context_config)
    if context_config_digest(cfg) != boundary.context_config_digest:
        raise ValueError("the boundary's context config does not rebuild its digest")
    store_context_config(artifacts, cfg)
    for policy in [load_policy(boundary.policy_module, boundary.policy_object)] + [
        load_policy(name) for name in boundary.shadow_policies
    ]:
        store_policy_config(artifacts, policy)
