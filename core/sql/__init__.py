"""SQL that lakemv generates as text: quoting and literals, the incremental step, the content diff."""
