"""The former home of device choice, now bitextmine/devices.py: kept while mining/arrays.py,
steps/mine.py and train/loop.py still import it from here."""

from bitextmine.devices import DEVICE_NAME, check_device, pick_device

__all__ = ["DEVICE_NAME", "check_device", "pick_device"]
