"""The observer web UI's static files (served at ``/ui/`` by :func:`turngate.api.ui.mount_ui`)."""
