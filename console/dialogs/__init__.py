"""Small generic modals (frogmouth style): confirm and text input."""

from console.dialogs.confirm import ConfirmDialog
from console.dialogs.grant import GrantDialog
from console.dialogs.text_input import TextDialog

__all__ = ["ConfirmDialog", "GrantDialog", "TextDialog"]
