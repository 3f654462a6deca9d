"""minitrain: the lesson's training code as a package."""
