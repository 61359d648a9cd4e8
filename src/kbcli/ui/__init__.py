"""``kb ui``: the web page (assets/), its server (server) and its JSON API (api)."""
