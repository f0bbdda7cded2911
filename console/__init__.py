"""The Textual operator console; talks to the gateway only through its control socket."""
