"""The tool platform: specs and registry (`registry`), the HTTP executor (`http`) and how
results become text for the model (`formatting`)."""
