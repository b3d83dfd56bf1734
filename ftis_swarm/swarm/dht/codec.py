"""Strict decoding of the DHT values peers send, before hivemind decodes any of it.

hivemind decodes a whole-dictionary value with msgpack and its registered extension
types, and logs one warning per unknown extension type: a 60 KB value of 20,000 of them
wrote 20,001 lines to every peer's log before any validator ran. Here a dictionary is the
one extension this swarm uses (`DictionaryDHTValue`, code 0x50) holding plain
`[subkey, value, expiry]` items; the first other extension, nesting or shape ends the
decode with one `NotPointerForm` error.
"""

from __future__ import annotations

import math

import msgpack
from hivemind.dht.storage import DictionaryDHTValue
from hivemind.utils.serializer import MSGPackSerializer

DICTIONARY_EXT = 0x50
"""hivemind's extension code of DictionaryDHTValue."""
MAX_DICTIONARY_ITEMS = 8192
"""More records than fit under one key of any honest peer (1 MiB, ~1 KB each)."""

Item = tuple[bytes, bytes, float]  # (serialized subkey, value, expiry)


class NotPointerForm(ValueError):
    """A DHT value that is not this swarm's form (one sentence, no per-item detail)."""


def dictionary_items(payload: bytes) -> list[Item]:
    """The items of a DictionaryDHTValue's extension payload, each subkey serialized again."""
    try:
        obj = msgpack.unpackb(payload, raw=False, strict_map_key=True, max_ext_len=0, max_map_len=0,
                              max_array_len=MAX_DICTIONARY_ITEMS)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise NotPointerForm(f"a dictionary that does not decode strictly ({type(exc).__name__})") from None
    if not (isinstance(obj, list) and len(obj) == 3 and isinstance(obj[2], list)):
        raise NotPointerForm("a dictionary that is not [maxsize, expiry, items]")
    items = []
    for item in obj[2]:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], bytes)
                and isinstance(item[1], bytes) and isinstance(item[2], (int, float)) and math.isfinite(item[2])):
            raise NotPointerForm("a dictionary item that is not [bytes subkey, bytes value, expiry]")
        items.append((MSGPackSerializer.dumps(item[0]), item[1], float(item[2])))
    return items


def value_items(value: bytes) -> list[Item]:
    """The items of a whole serialized dictionary value (what a whole-dictionary store or a find reply holds)."""
    try:
        obj = msgpack.unpackb(value, raw=False, max_array_len=0, max_map_len=0)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise NotPointerForm(f"a value that is not one dictionary ({type(exc).__name__})") from None
    if not (isinstance(obj, msgpack.ExtType) and obj.code == DICTIONARY_EXT):
        raise NotPointerForm("a value that is not one dictionary")
    return dictionary_items(obj.data)


def _dictionary_only(code: int, data: bytes) -> DictionaryDHTValue:
    if code != DICTIONARY_EXT:
        raise NotPointerForm(f"msgpack extension type {code}")
    dictionary = DictionaryDHTValue()
    with dictionary.freeze():
        for subkey, value, expiration in dictionary_items(data):
            dictionary.store(MSGPackSerializer.loads(subkey), value, expiration)
    return dictionary


class BoundedSerializer(MSGPackSerializer):
    """hivemind's serializer, decoding only this swarm's one extension type (the rest: NotPointerForm).

    Installed on the DHT protocol, so that hivemind's own searches (the nearest-peer lookups
    of a publish) decode peers' replies no more loosely than the swarm's reader does.
    """

    @classmethod
    def loads(cls, buf: bytes) -> object:
        try:
            return msgpack.unpackb(buf, raw=False, ext_hook=_dictionary_only)
        except NotPointerForm:
            raise
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            raise NotPointerForm(f"a value that does not decode ({type(exc).__name__})") from None
