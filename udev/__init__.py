"""Finding serial devices (pyudev), naming them by USB port path (rules), and hotplug."""
