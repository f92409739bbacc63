"""A Foxglove WebSocket protocol client for the tests, built on ``websockets``.

It does what the Foxglove app does: asks for the subprotocol (``foxglove.sdk.v1``, the
SDK's name of protocol v1, or ``foxglove.websocket.v1``), reads ``serverInfo`` and the
``advertise`` messages, subscribes to every advertised channel, and decodes each binary
``messageData`` (opcode 1: subscription id u32, log time u64 ns, payload, little-endian)
with the schema the server sent: protobuf through the ``FileDescriptorSet`` in the
advertisement (``google.protobuf``), JSON as JSON. Nothing of the server is mocked.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import websockets
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

SUBPROTOCOLS = ["foxglove.sdk.v1", "foxglove.websocket.v1"]


@dataclass
class Received:
    """What a client saw: the server's info, the channels, decoded messages per topic."""

    subprotocol: str | None = None
    server_info: dict[str, Any] = field(default_factory=dict)
    channels: dict[int, dict[str, Any]] = field(default_factory=dict)
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    log_times: dict[str, list[int]] = field(default_factory=dict)


def _decoder(channel: dict[str, Any]):
    if channel["encoding"] == "json":
        return lambda payload: json.loads(payload)
    assert channel["encoding"] == "protobuf", channel
    assert channel.get("schemaEncoding", "protobuf") == "protobuf"
    fds = descriptor_pb2.FileDescriptorSet.FromString(base64.b64decode(channel["schema"]))
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(channel["schemaName"]))
    return lambda payload: MessageToDict(
        cls.FromString(payload),
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )


async def _collect(url: str, seconds: float, until: Any, subprotocols: list[str]) -> Received:
    out = Received()
    decoders: dict[int, Any] = {}
    subs: dict[int, int] = {}
    deadline = time.monotonic() + seconds
    protocols: Any = subprotocols
    async with websockets.connect(url, subprotocols=protocols, open_timeout=10) as ws:
        out.subprotocol = ws.subprotocol
        while time.monotonic() < deadline:
            try:
                raw = await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
            except (TimeoutError, websockets.ConnectionClosed):  # the server went away
                break
            if isinstance(raw, str):
                msg = json.loads(raw)
                if msg["op"] == "serverInfo":
                    out.server_info = msg
                elif msg["op"] == "advertise":
                    new = []
                    for ch in msg["channels"]:
                        out.channels[ch["id"]] = ch
                        decoders[ch["id"]] = _decoder(ch)
                        sub = len(subs) + 1
                        subs[sub] = ch["id"]
                        new.append({"id": sub, "channelId": ch["id"]})
                    await ws.send(json.dumps({"op": "subscribe", "subscriptions": new}))
                continue
            op, sub, log_time = struct.unpack_from("<BIQ", raw)
            if op != 1 or sub not in subs:
                continue
            ch = out.channels[subs[sub]]
            topic = ch["topic"]
            out.messages.setdefault(topic, []).append(decoders[ch["id"]](raw[13:]))
            out.log_times.setdefault(topic, []).append(log_time)
            if until is not None and until(out):
                break
    return out


def stamp_ns(text: str) -> int:
    """A decoded message's ``timestamp`` (RFC 3339 text, as protobuf's JSON mapping
    gives it) in ns since 1970."""
    ts = Timestamp()
    ts.FromJsonString(text)
    return int(ts.ToNanoseconds())


def collect(
    url: str, seconds: float, until: Any = None, subprotocols: list[str] = SUBPROTOCOLS
) -> Received:
    """Connect to ``url`` offering ``subprotocols``, subscribe to everything, decode for at
    most ``seconds`` (s), until ``until(received)`` is true or until the server closes."""
    return asyncio.run(_collect(url, seconds, until, subprotocols))


if __name__ == "__main__":  # a client in a process of its own: URL SECONDS PROTOCOL...
    import sys

    got = collect(sys.argv[1], float(sys.argv[2]), lambda r: len(r.messages.get("/pose", ())) >= 3,
                  sys.argv[3:])  # fmt: skip
    print(json.dumps({"subprotocol": got.subprotocol, "pose": got.messages.get("/pose", [])}))
