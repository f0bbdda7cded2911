"""What many test modules share: daemons, images, sshd nodes."""
