def model(preset:
    return {}
