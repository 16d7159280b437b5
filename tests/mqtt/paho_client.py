#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""A real MQTT 3.1.1 client (Python paho-mqtt) for tests/test_mqtt_kernel.c.

paho_client.py HOST PORT DEVICE PASSWORD KEEPALIVE SECONDS
Connects with user name DEVICE, publishes QoS 0 and QoS 1 to devices/DEVICE/up/paho,
subscribes to devices/DEVICE/down, stays connected SECONDS (paho sends a PINGREQ each
KEEPALIVE), prints one line per downlink received ("down PAYLOAD") and finally
"ok connected=1 rc=0 puback=N suback=GRANTED" (N counts both PUBLISHes: paho reports a
QoS 0 one once sent, a QoS 1 one at its PUBACK) and disconnects. Exit 0 on success.
"""
import sys
import time

import paho.mqtt.client as mqtt

host, port, dev, pw, keepalive, secs = sys.argv[1:7]
port, keepalive, secs = int(port), int(keepalive), float(secs)
state = {"connected": 0, "rc": None, "puback": 0, "suback": None, "down": []}

c = mqtt.Client(client_id="paho-" + dev, clean_session=True, protocol=mqtt.MQTTv311)
c.username_pw_set(dev, pw)


def on_connect(client, userdata, flags, rc):
    state["rc"] = rc
    if rc == 0:
        state["connected"] = 1
        client.subscribe("devices/%s/down" % dev, qos=1)
        client.publish("devices/%s/up/paho" % dev, b"qos0", qos=0)
        client.publish("devices/%s/up/paho" % dev, b"qos1", qos=1)


def on_publish(client, userdata, mid):
    state["puback"] += 1


def on_subscribe(client, userdata, mid, granted):
    state["suback"] = granted[0]
    print("subscribed", flush=True)


def on_message(client, userdata, msg):
    state["down"].append(msg.payload)
    print("down %s" % msg.payload.decode(errors="replace"), flush=True)


c.on_connect = on_connect
c.on_publish = on_publish
c.on_subscribe = on_subscribe
c.on_message = on_message
c.connect(host, port, keepalive=keepalive)
c.loop_start()
time.sleep(secs)
ok = state["connected"] == 1
print("ok connected=%d rc=%s puback=%d suback=%s" %
      (state["connected"], state["rc"], state["puback"], state["suback"]), flush=True)
c.disconnect()
c.loop_stop()
sys.exit(0 if ok else 1)
