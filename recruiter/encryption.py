"""Encrypted arguments: a job's parameters stored sealed with AES-GCM under a key the
application holds, opened only where the job runs (docs/guides/encryption.md).

The application gives a :class:`KeyRing` (key ids and 256-bit keys, one of them the
current key) to the registry its workers load, and seals a job with
:meth:`recruiter.JobSpec.encrypted` or by registering its workable with
``encrypted=True``. The job document then holds ``workable.encrypted``
(``{key, nonce, data}``: the key's id, a fresh 96-bit nonce, the ciphertext of the
parameters' BSON with its tag) and no parameters; the workable's name is bound in as
associated data, so a sealed blob copied into another workable's job does not open.
Rotation: add a new key as the current one, keep the old ones until no job sealed
under them is left.

>>> ring = KeyRing({"2026-11": bytes(32)})
>>> sealed = ring.seal({"card": "4242"}, "payments.charge")
>>> sealed["key"], ring.open(sealed, "payments.charge")
('2026-11', {'card': '4242'})
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from typing import Any

import bson
from bson.codec_options import CodecOptions

from recruiter.errors import RecruiterError

KEY_BYTES = 32
NONCE_BYTES = 12
MOST_KEY_ID = 64
"""The longest key id, in characters."""


CODEC: CodecOptions[dict[str, Any]] = CodecOptions(tz_aware=True)
"""The arguments' BSON, sealed and opened: dates aware of their zone, as the store reads them."""


def _bound(workable: str, method: str) -> bytes:
    """The associated data a seal is bound to: a blob moved to another workable, or
    another method of it, does not open."""
    return f"{workable}\x00{method}".encode()


class EncryptionError(RecruiterError):
    """A key ring that cannot be built, or sealed arguments that cannot be opened."""


def new_key() -> str:
    """A fresh random 256-bit key, as the URL-safe base64 text :class:`KeyRing` reads."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


def _aead() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # noqa: PLC0415 (an extra)
    except ImportError:
        raise EncryptionError(
            "encrypted arguments need the cryptography package: pip install 'recruiter[encryption]'"
        ) from None
    return AESGCM


def _key_bytes(key_id: str, key: bytes | str) -> bytes:
    if isinstance(key, str):
        try:
            key = base64.urlsafe_b64decode(key.encode())
        except (binascii.Error, ValueError):
            raise EncryptionError(
                f"key {key_id!r} is not base64 text: make one with recruiter.new_key()"
            ) from None
    if not isinstance(key, bytes) or len(key) != KEY_BYTES:
        raise EncryptionError(
            f"key {key_id!r} must be {KEY_BYTES} bytes (256 bits): make one with "
            "recruiter.new_key()"
        )
    return key


class KeyRing:
    """Keys by id, one of them ``current`` (by default the last given): jobs are sealed
    under the current key and opened under the key whose id they name."""

    def __init__(self, keys: Mapping[str, bytes | str], current: str | None = None) -> None:
        if not keys:
            raise EncryptionError("a key ring holds at least one key")
        aead = _aead()
        self._ciphers: dict[str, Any] = {}
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not 0 < len(key_id) <= MOST_KEY_ID:
                raise EncryptionError(
                    f"a key id is text of 1 to {MOST_KEY_ID} characters, got {key_id!r}"
                )
            self._ciphers[key_id] = aead(_key_bytes(key_id, key))
        self.current = list(keys)[-1] if current is None else current
        if self.current not in self._ciphers:
            raise EncryptionError(f"the current key {self.current!r} is not in the ring")

    @classmethod
    def from_text(cls, text: str) -> KeyRing:
        """A ring from ``"id:key,id:key"`` (the keys as :func:`new_key` writes them), the
        first the current one: the form an environment variable holds."""
        pairs = [part.strip().partition(":") for part in text.split(",") if part.strip()]
        if not pairs or any(not key_id or not key for key_id, _, key in pairs):
            raise EncryptionError("a key ring's text is 'id:key,id:key' (the current first)")
        return cls({key_id: key for key_id, _, key in pairs}, current=pairs[0][0])

    @property
    def key_ids(self) -> list[str]:
        return list(self._ciphers)

    def seal(
        self, parameters: Mapping[str, Any], workable: str, method: str = "execute"
    ) -> dict[str, Any]:
        """``parameters`` sealed under the current key, bound to ``workable`` and its
        ``method``."""
        nonce = os.urandom(NONCE_BYTES)
        plain = bson.encode(dict(parameters), codec_options=CODEC)
        data = self._ciphers[self.current].encrypt(nonce, plain, _bound(workable, method))
        return {"key": self.current, "nonce": nonce, "data": data}

    def open(self, sealed: Any, workable: str, method: str = "execute") -> dict[str, Any]:
        """The parameters ``sealed`` holds; :class:`EncryptionError` saying why not."""
        if not isinstance(sealed, Mapping):
            raise EncryptionError("the job's encrypted arguments are damaged")
        key_id, nonce, data = sealed.get("key"), sealed.get("nonce"), sealed.get("data")
        if not isinstance(nonce, bytes) or not isinstance(data, bytes):
            raise EncryptionError("the job's encrypted arguments are damaged")
        cipher = self._ciphers.get(key_id) if isinstance(key_id, str) else None
        if cipher is None:
            raise EncryptionError(
                f"the job's arguments are sealed under key {key_id!r}, which this key ring "
                f"does not hold (it holds {', '.join(map(repr, self._ciphers))}): add that "
                "key to the ring and retry the job"
            )
        try:
            opened = cipher.decrypt(nonce, data, _bound(workable, method))
        except Exception:  # InvalidTag, or a nonce of the wrong size
            raise EncryptionError(
                f"the job's arguments do not open under key {key_id!r}: the key under that "
                "id differs from the one they were sealed with, or the job was altered"
            ) from None
        return dict(bson.decode(opened, codec_options=CODEC))

    def __repr__(self) -> str:  # (never the keys)
        return f"KeyRing(keys={self.key_ids!r}, current={self.current!r})"


class KeyRingHolder:
    """The key ring a registry seals and opens jobs' arguments with."""

    key_ring: KeyRing | None
    """Opens the encrypted jobs' arguments (:meth:`use_key_ring`)."""

    def use_key_ring(self, key_ring: KeyRing) -> None:
        """Seal the jobs of the workables registered ``encrypted=True`` with ``key_ring``'s
        current key, and open any job's encrypted arguments with the key it names
        (docs/guides/encryption.md)."""
        if not isinstance(key_ring, KeyRing):
            raise EncryptionError(f"use_key_ring takes a KeyRing, got {key_ring!r}")
        self.key_ring = key_ring

    def key_ring_for(self, name: str) -> KeyRing:
        """The key ring that seals the jobs of ``name``; :class:`EncryptionError` if none."""
        if self.key_ring is None:
            raise EncryptionError(
                f"workable {name!r} is encrypted: give its registry a key ring first "
                "(registry.use_key_ring(KeyRing(...)))"
            )
        return self.key_ring

    def arguments(
        self,
        name: str,
        parameters: Mapping[str, Any],
        encrypted: Mapping[str, Any] | None,
        method: str = "execute",
    ) -> Mapping[str, Any]:
        """A stored job's arguments: its ``parameters``, and those ``encrypted`` opened
        with this registry's key ring (:class:`EncryptionError` saying what to do)."""
        if encrypted is None:
            return parameters
        if self.key_ring is None:
            raise EncryptionError(
                f"the arguments of this {name!r} job are encrypted, and this worker's "
                "registry holds no key ring: registry.use_key_ring(KeyRing(...))"
            )
        return {**parameters, **self.key_ring.open(encrypted, name, method)}
