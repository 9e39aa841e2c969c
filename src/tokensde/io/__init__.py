"""Files: results on disk, the HTML report, progress bars."""
