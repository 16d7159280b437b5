#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Raw-socket MQTT device for tests/test_mqtt_kernel.c: packets written byte by byte, so the
test chooses how they share TCP segments.

raw_client.py HOST PORT DEVICE PASSWORD MODE
  coalesced  three PINGREQs in one segment: three PINGRESPs
  split      one PINGREQ in two segments 50 ms apart: one PINGRESP
  mixed      PINGREQ + PUBLISH QoS 1 (packet id 5) + PINGREQ in one segment, then the same
             split across two segments mid-PUBLISH, then split inside the PUBLISH's 2-byte
             remaining length: two PINGRESPs and a PUBACK each time
  silent     keepalive 1, then nothing: the server must close within 4 s (prints the time)
Prints "ok ..." and exits 0 when the server answered as expected.
"""
import socket
import struct
import sys
import time


def s(b):
    return struct.pack(">H", len(b)) + b


def packet(t, flags, body):
    n, vi = len(body), b""
    while True:
        x, n = n & 127, n >> 7
        vi += bytes([x | (128 if n else 0)])
        if not n:
            break
    return bytes([t << 4 | flags]) + vi + body


def connect(host, port, dev, pw, keepalive):
    c = socket.create_connection((host, port), timeout=5)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = s(b"MQTT") + bytes([4, 0xc2]) + struct.pack(">H", keepalive) + s(b"raw-" + dev.encode())
    body += s(dev.encode()) + s(pw.encode())
    c.sendall(packet(1, 0, body))
    if read(c, 4) != b"\x20\x02\x00\x00":
        sys.exit("no CONNACK 0")
    return c


def read(c, n):
    out = b""
    while len(out) < n:
        b = c.recv(n - len(out))
        if not b:
            break
        out += b
    return out


def main():
    host, port, dev, pw, mode = sys.argv[1:6]
    port = int(port)
    ping = b"\xc0\x00"
    if mode == "silent":
        c = connect(host, port, dev, pw, 1)
        t0 = time.monotonic()
        c.settimeout(4)
        try:
            b = c.recv(16)
        except socket.timeout:
            sys.exit("not closed within 4 s")
        except ConnectionResetError:
            b = b""
        if b:
            sys.exit("unexpected bytes %r" % b)
        print("ok closed after %.2f s" % (time.monotonic() - t0))
        return
    c = connect(host, port, dev, pw, 30)
    if mode == "coalesced":
        c.sendall(ping * 3)
        got = read(c, 6)
        if got != b"\xd0\x00" * 3:
            sys.exit("got %r" % got)
    elif mode == "split":
        c.send(ping[:1])
        time.sleep(0.05)
        c.send(ping[1:])
        got = read(c, 2)
        if got != b"\xd0\x00":
            sys.exit("got %r" % got)
    elif mode == "mixed":
        # 200 bytes of payload: a 2-byte remaining length, which one cut splits
        pub = packet(3, 2, s(("devices/%s/up/raw" % dev).encode()) + b"\x00\x05" + b"x" * 200)
        for cut in (None, 2 + 7, 2 + 2):
            seg = ping + pub + ping
            if cut is None:
                c.sendall(seg)
            else:
                c.send(seg[:cut])
                time.sleep(0.05)
                c.send(seg[cut:])
            got = read(c, 8)
            if sorted([got[i:i + 2] for i in range(0, 8, 2)]) != sorted(
                    [b"\xd0\x00", b"\xd0\x00", b"\x40\x02", b"\x00\x05"]) or \
                    b"\x40\x02\x00\x05" not in got:
                sys.exit("got %r" % got)
    else:
        sys.exit("unknown mode " + mode)
    c.sendall(b"\xe0\x00")
    print("ok")


main()
