"""Releasing the course: the bilingual solutions split into student editions, nbgrader course directories."""
