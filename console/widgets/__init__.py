"""The console's panes and widgets."""
