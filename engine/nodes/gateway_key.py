"""A gateway's own identity towards its nodes: an Ed25519 key in its state dir that signs each link's
challenge, so a node shared by several gateways files each one's sessions apart, under a name the gateway
proved (the key's fingerprint) rather than one a frame claimed. Several gateways may log in with the same
SSH key; each still holds its own gateway key."""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path

from engine import statefs

FILE_NAME = "gateway-key.pem"
CAP = "link.identify"  # a node that speaks it: the gateway proves its key as the link comes up
_CONTEXT = b"exechost gateway link v1\x00"


def _signed(node_id: str, nonce: str) -> bytes:
    """What the gateway signs: bound to the node (its id) and to this link (the node's fresh nonce), so a
    signature seen by one node or on one link is worth nothing on another."""
    return _CONTEXT + node_id.encode() + b"\x00" + nonce.encode()


def fingerprint(public: bytes) -> str:
    return hashlib.sha256(public).hexdigest()[:32]


def new_nonce() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True)
class GatewayKey:
    private_pem: bytes

    @classmethod
    def load_or_create(cls, state_dir: Path) -> GatewayKey:
        """<state>/gateway-key.pem (0600), made on first use; a gateway keeps its identity across restarts."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        path = state_dir / FILE_NAME
        text = statefs.read_text(path)
        if text is not None:
            key = cls(text.encode())
            key._private()  # a broken file says so here, not on the first link
            return key
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        statefs.atomic_write(path, pem)
        return cls(pem)

    def _private(self) -> object:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = serialization.load_pem_private_key(self.private_pem, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{FILE_NAME}: not an Ed25519 key")
        return key

    def public(self) -> bytes:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = self._private()
        assert isinstance(key, Ed25519PrivateKey)
        return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    def proof(self, node_id: str, nonce: str) -> dict[str, str]:
        """The `link.identify` params answering a node's challenge."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        key = self._private()
        assert isinstance(key, Ed25519PrivateKey)
        return {
            "publicKey": base64.b64encode(self.public()).decode(),
            "signature": base64.b64encode(key.sign(_signed(node_id, nonce))).decode(),
        }


def verify(params: dict[str, object], node_id: str, nonce: str) -> str | None:
    """The fingerprint of the gateway key that signed this link's challenge, or None when the proof fails."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    public, signature = params.get("publicKey"), params.get("signature")
    if not isinstance(public, str) or not isinstance(signature, str) or len(public) + len(signature) > 400:
        return None
    try:
        raw = base64.b64decode(public, validate=True)
        Ed25519PublicKey.from_public_bytes(raw).verify(
            base64.b64decode(signature, validate=True), _signed(node_id, nonce)
        )
    except (InvalidSignature, ValueError, binascii.Error):
        return None
    return fingerprint(raw)
