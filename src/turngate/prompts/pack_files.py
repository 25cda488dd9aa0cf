"""Read one file of a prompt pack, refusing anything that leaves the pack (layers and builders)."""

from __future__ import annotations

from pathlib import Path

from turngate.core.prompt_layers import PromptPackError

__all__ = ["read_pack_file"]


def read_pack_file(root: Path, relative: str, max_bytes: int) -> bytes | None:
    """The bytes of ``root/relative`` (``root`` resolved), or None when there is no such file.

    Raises :class:`PromptPackError`: ``prompts.path_escape`` (a symlink out of the pack),
    ``prompts.unreadable`` (not a regular file, or reading failed), ``prompts.too_large``.
    """
    path = root / relative
    if not path.exists() and not path.is_symlink():
        return None
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise PromptPackError("prompts.path_escape", f"{relative} points outside the prompt pack")
    if not resolved.is_file():
        raise PromptPackError("prompts.unreadable", f"{relative} exists but is not a regular file")
    try:
        size = resolved.stat().st_size
        if size > max_bytes:
            raise PromptPackError(
                "prompts.too_large", f"{relative} is {size} bytes; the limit is {max_bytes}"
            )
        return resolved.read_bytes()
    except OSError as exc:
        raise PromptPackError("prompts.unreadable", f"{relative}: {exc.strerror or exc}") from exc
