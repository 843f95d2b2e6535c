"""The device names and checks of bitextmine/devices.py, where they live, under their former module name
for the importers not yet pointed there."""

from bitextmine.devices import DEVICE_NAME, check_device, pick_device

__all__ = ["DEVICE_NAME", "check_device", "pick_device"]
