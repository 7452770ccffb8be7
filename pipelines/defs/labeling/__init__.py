"""The labeling group: the label tasks exported and the labels imported, and their sensors."""
