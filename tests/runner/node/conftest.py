from tests.helpers.sshd import sshd_nodes  # noqa: F401  (the fixture)
