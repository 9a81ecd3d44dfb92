"""Who may call ``rollarc serve`` and what it may load: the API key, the body cap, the reload directory.

Pure rules, so each is tested without a server. The key is kept as its sha256 (the plain key never leaves
the process that parsed the command line: Ray Serve stores a deployment's arguments in its controller) and
compared in constant time. A reload loads an HF checkpoint from a path the client names, so it is refused
unless the server was given a directory to load from, and the path, once ``..`` and symlinks are resolved,
lies inside it; the refusal does not echo a path outside.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

API_KEY_ENV = "ROLLARC_API_KEY"
DEFAULT_MAX_BODY_BYTES = 1 << 20
BEARER = "Bearer "


class AccessError(Exception):
    """A request refused before it reaches the engine: ``status`` (401, 403, 413, 400) and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def key_digest(api_key: str) -> str:
    return hashlib.sha256(api_key.encode()).hexdigest()


@dataclass(frozen=True)
class ServerAccess:
    """``api_key_sha256``: None serves anyone; ``reload_dir``: None refuses every reload."""

    api_key_sha256: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    reload_dir: str | None = None

    @classmethod
    def build(cls, api_key: str | None, max_body_bytes: int, reload_dir: str | None) -> ServerAccess:
        if max_body_bytes < 1:
            raise ValueError(f"--max-body-bytes must be >= 1, got {max_body_bytes}")
        if reload_dir is not None and not Path(reload_dir).is_dir():
            raise ValueError(f"--reload-dir {reload_dir}: not a directory; create it or pass an existing one")
        return cls(
            api_key_sha256=key_digest(api_key) if api_key else None,
            max_body_bytes=max_body_bytes,
            reload_dir=str(Path(reload_dir).resolve()) if reload_dir is not None else None,
        )

    def check_key(self, authorization: str | None) -> None:
        """Raise 401 unless ``authorization`` is ``Bearer KEY`` with the server's key (when it has one)."""
        if self.api_key_sha256 is None:
            return
        given = authorization[len(BEARER) :] if authorization and authorization.startswith(BEARER) else ""
        if not hmac.compare_digest(key_digest(given), self.api_key_sha256):
            raise AccessError(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY'")

    def check_length(self, content_length: str | None) -> None:
        """Raise 413 when the declared body is over the cap (a body without a length is counted as it is read)."""
        if content_length is not None and content_length.strip().isdigit():
            self.check_size(int(content_length))

    def check_size(self, size: int) -> None:
        if size > self.max_body_bytes:
            raise AccessError(
                413, f"request body over {self.max_body_bytes} bytes (the server's --max-body-bytes); send less"
            )

    def reload_target(self, model_path: Any) -> Path:
        """The checkpoint directory a reload may load: inside ``reload_dir`` after resolving ``..`` and symlinks."""
        if self.reload_dir is None:
            raise AccessError(
                403, "reloads are disabled on this server: start rollarc serve with --reload-dir DIR to allow them"
            )
        if not isinstance(model_path, str) or not model_path:
            raise AccessError(400, "reload needs a JSON body {'model_path': DIR, 'version': V} with DIR a string")
        root = Path(self.reload_dir)
        try:
            target = (root / model_path).resolve()  # a relative path is taken under the reload directory
        except (ValueError, OSError, RuntimeError):  # a NUL byte; a symlink loop (RuntimeError before 3.13)
            raise AccessError(400, "model_path is not a usable path") from None
        if not target.is_relative_to(root):
            raise AccessError(403, "model_path is outside the server's --reload-dir; refused")
        return target


def bearer_headers(env_name: str | None) -> dict[str, str]:
    """The client's side: ``Authorization: Bearer KEY`` with the key in the environment variable ``env_name``."""
    key = os.environ.get(env_name, "") if env_name else ""
    return {"Authorization": f"{BEARER}{key}"} if key else {}
