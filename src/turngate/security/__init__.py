"""The trust boundary: API keys, principals, route roles, rate and stream limits (docs/SECURITY.md)."""

from turngate.security.keys import ApiKey, CreatedKey, KeyStore
from turngate.security.principal import ROLES, Principal

__all__ = ["ROLES", "ApiKey", "CreatedKey", "KeyStore", "Principal"]
