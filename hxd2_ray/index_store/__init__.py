"""What an index on disk is, read by the query side and written by the indexer.

Where things are: :mod:`layout` names an index's files and :mod:`manifest` records them (the manifest names the
published generation, its config and checksums); :mod:`generations` publishes and prunes generations and keeps each
one's corpus state (:mod:`corpus`: a corpus as tables and how a change alters them); :mod:`tables` holds the
schemas of the tables a build writes. :mod:`leases` lets a reader keep its generation while a newer one is
published; :mod:`build_lock` keeps two builds off one output, which :mod:`output` opens, checks and sweeps.
:mod:`cluster_storage` says whether a path is one every node of a cluster shares, :mod:`disk_space` checks an
output's free space against a generation's size, and :mod:`backup` exports a published generation to one archive
and imports it elsewhere. Nothing here imports the query side, the stages or Ray.
"""
