"""Anchor keys for tests: an Ed25519 pair written where the settings read it, the ``Trust``
that accepts it, and the environment an anchor job (private key) or a verifier (public keys
only) runs with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.proof import Signer, Trust


@dataclass
class AnchorKeys:
    signer: Signer
    key_path: Path
    pub_path: Path

    def trust(self, *others: AnchorKeys, hmac_key: str | None = None) -> Trust:
        return Trust([self.signer.public_pem, *[o.signer.public_pem for o in others]], hmac_key)

    def signing_env(self) -> dict[str, str]:
        return {"AUDIT_SIGNING_KEY_FILE": str(self.key_path), **self.verifying_env()}

    def verifying_env(self, *others: AnchorKeys) -> dict[str, str]:
        paths = [self.pub_path, *[o.pub_path for o in others]]
        return {"AUDIT_PUBLIC_KEYS": ",".join(str(p) for p in paths)}


def make_keys(folder: Path, name: str = "anchor") -> AnchorKeys:
    folder.mkdir(parents=True, exist_ok=True)
    private = Signer.generate()
    signer = Signer(private)
    key_path, pub_path = folder / f"{name}.key", folder / f"{name}.pub"
    key_path.write_bytes(private)
    pub_path.write_bytes(signer.public_pem)
    return AnchorKeys(signer, key_path, pub_path)
