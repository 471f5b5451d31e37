__version__ = '0.1.0'


def parse_version_info(version_str: str) -> tuple:
    """Parse a version string like ``'0.1.0rc1'`` into a comparable tuple."""
    info = []
    for part in version_str.split('.'):
        if part.isdigit():
            info.append(int(part))
        elif 'rc' in part:
            number, rc = part.split('rc')
            info.extend([int(number), f'rc{rc}'])
    return tuple(info)


version_info = parse_version_info(__version__)
