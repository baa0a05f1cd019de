"""A rank's log as the node reads it: followed line by line for the console, and its last lines read at a bounded cost."""
