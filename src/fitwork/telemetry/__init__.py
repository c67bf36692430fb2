"""What happened in a run: worker events, the run record, and the arithmetic over them."""
