"""Releasing the course: bilingual sources split into student editions, nbgrader course directories."""
