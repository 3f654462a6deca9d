"""The hub's spawner where systemd does not run: JupyterHub's local process spawner, with each
user's server held to its limits in a cgroup of that user's (:mod:`graders.hub.limits`). Only the
hub's own process imports it (it imports JupyterHub)."""

import asyncio
import os

from jupyterhub.spawner import LocalProcessSpawner

from graders.grade import cgroups
from graders.hub.limits import USER_PROCESSES, USERS_GROUP


class CgroupSpawner(LocalProcessSpawner):
    """JupyterHub's local process spawner, with each user's server in a cgroup of that user's held to
    the hub's ``mem_limit`` and ``cpu_limit`` (the local spawner itself ignores both): the server joins
    it as root, just before it becomes the user. A new server of the user first ends what an earlier
    one left running there; a stopped server's cgroup goes with everything still in it."""

    _cgroup = None  # the server's cgroup folders, made by start() for the preexec function

    async def start(self):
        found = cgroups.detect(group=USERS_GROUP)
        if found.version:
            memory = self.mem_limit or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            self._cgroup = cgroups.prepare(found, self.user.name, memory, USER_PROCESSES,
                                           self.cpu_limit or os.cpu_count() or 1)
        else:
            self.log.warning("%s's server runs without limits: %s", self.user.name, found.reason)
        return await super().start()

    def make_preexec_fn(self, name):
        become_user = super().make_preexec_fn(name)
        folders = self._cgroup

        def preexec():
            if folders:
                cgroups.join(folders)  # as root still: the user may not move a process into it
            become_user()

        return preexec

    async def stop(self, now=False):
        await super().stop(now=now)
        found = cgroups.detect(group=USERS_GROUP)
        if found.version:
            try:
                await asyncio.to_thread(cgroups.remove, cgroups.folders_of(found, self.user.name))
            except OSError as error:  # gone already, or still busy: the next start empties it
                self.log.debug("%s's cgroup stays: %s", self.user.name, error)
