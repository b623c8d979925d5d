"""Side effects, one module per kind: `ssh` (the one SSH session to a node) and `files`
(the one atomic write, and where ctl keeps its state). The domain packages above them
decide what to say; these decide how it reaches a node or a disk."""
